"""Exit 0 if the installed llama-cpp-python answers one chat completion with the shipped SmolLM2 model.

A llama-cpp-python wheel compiled on another machine (pip caches the wheel it built, with that CPU's instruction
set) can crash with a segmentation fault here; scripts/test.sh then rebuilds it portably."""

import llama_cpp

from workers.local_judge import model_path

model = llama_cpp.Llama(model_path=str(model_path()), n_ctx=2048, n_threads=2, verbose=False, chat_format="chatml")
reply = model.create_chat_completion(messages=[{"role": "user", "content": "Say hi"}], max_tokens=4, temperature=0.0)
raise SystemExit(0 if isinstance(reply, dict) and reply.get("choices") else 1)
