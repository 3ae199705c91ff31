"""dialogue-judge command line, process orchestration (``up``), the CI gate and the pytest plugin."""
