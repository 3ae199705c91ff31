"""Coverage and width of the calibrated (PPI++) intervals, simulated and on MT-Bench's real verdicts.

1. **Simulated.** Each repetition draws N + n items: a true quality ``t`` per item, a human label on the seed
   paper's 0-2 scale (``t`` plus rater noise, rounded to a step of 1/2, clipped), and a judge score on 1-100 with a
   bias and noise of its own. ``n`` uniformly chosen items are labeled. The estimand is the mean human label over
   the population (computed once from 2 M draws). Printed per judge and n: coverage of the calibrated interval
   (target >= 0.94 at 95 %), of the human-only interval, and of the judge-only interval (the judge's own mean put on
   the humans' scale, which its bias keeps from covering), and the median width of the calibrated interval against
   the human-only one (target <= 0.8 where the judge correlates >= 0.6 with the humans).
2. **Real.** ``../shared/data/mtbench_human_judgments``: per model pair, the items (question x turn) with expert
   votes are the population; the humans' value of an item is the mean of its expert votes as a win share of the
   pair's first model (1 / 1/2 / 0), GPT-4's the same for its order-combined verdict. The truth is the mean over the
   population's items. For n in {25, 50, 100} labeled items drawn at random (at most the items the pair has), 500
   draws: coverage (target >= 0.93) and median width against human-only, over the 15 pairs. The vote-weighted
   expert win rate (every vote counts once) is printed beside the item mean it differs from.

3. **Active against uniform.** A simulated judge whose errors concentrate on a known tenth of the items (noise 60
   points there, 3 elsewhere), where its samples disagree (the uncertainty a label queue reads). For each strategy
   and n, 300 draws of a label queue (``stats.label_sampling``) and the inverse-probability weighted estimate
   (``stats.ppi.ppi_mean_active``): median width and coverage. Printed: the labels ``active`` needs for the width
   ``uniform`` reaches with 100 (target <= 0.8x), from the 1/width^2 ~ n relation between the grid's points, and
   the best any inclusion rule could do. Run twice: each label from one rater, and each label the mean of three
   raters (the humans' noise bounds what a judge signal can save; docs/calibration.md).

Usage::

    python bench/bench_calibrated.py                 # 1,000 simulated repetitions, 500 real draws
    python bench/bench_calibrated.py --reps 200 --draws 100
    python bench/bench_calibrated.py --part active   # or simulated, real: one part only
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from judge_api.stats.label_sampling import ACTIVE_BASE, draw
from judge_api.stats.ppi import affine_to_scale, ppi_mean, ppi_mean_active

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mtbench_human_judgments"
JUDGES = {
    # name: (bias in quality units, noise of the judge in points on 1-100)
    "good judge (biased +0.3)": (0.3, 8.0),
    "fair judge (biased -0.2)": (-0.2, 25.0),
    "weak judge (unbiased)": (0.0, 60.0),
}


def _draw(rng: np.random.Generator, size: int | tuple[int, int], bias: float, noise: float) -> tuple[np.ndarray, ...]:
    quality = np.clip(rng.normal(1.0, 0.45, size), 0.0, 2.0)
    human = np.clip(np.round(2 * (quality + rng.normal(0.0, 0.25, size))) / 2, 0.0, 2.0)
    judge = np.clip(1 + 49.5 * (quality + bias) + rng.normal(0.0, noise, size), 1.0, 100.0)
    return human, judge


def simulated(reps: int, big_n: int, ns: list[int], ci: float, seed: int) -> None:
    print(f"1. simulated: {reps} repetitions, N = {big_n} unlabeled items, {int(ci * 100)} % intervals")
    print(
        f"   {'judge':<26} {'n':>4} {'corr':>5} {'calibrated':>10} {'human-only':>10} {'judge-only':>10} "
        f"{'width ratio':>11}"
    )
    rng = np.random.default_rng(seed)
    for name, (bias, noise) in JUDGES.items():
        big_h, big_j = _draw(rng, 2_000_000, bias, noise)
        truth = float(big_h.mean())
        corr = float(np.corrcoef(big_h, big_j)[0, 1])
        for n in ns:
            hits = np.zeros(3)
            ratios = np.empty(reps)
            for r in range(reps):
                human, judge = _draw(rng, n + big_n, bias, noise)
                mapped = affine_to_scale(judge, (1.0, 100.0), (0.0, 2.0))
                est = ppi_mean(human[:n], mapped[:n], mapped[n:], ci=ci)
                c, h = est.calibrated, est.human_only
                judge_mean = float(mapped.mean())
                judge_half = 1.959963984540054 * float(mapped.std()) / np.sqrt(mapped.size)
                hits += [
                    c.ci_low <= truth <= c.ci_high,
                    h.ci_low <= truth <= h.ci_high,
                    judge_mean - judge_half <= truth <= judge_mean + judge_half,
                ]
                ratios[r] = (c.ci_high - c.ci_low) / (h.ci_high - h.ci_low)
            cov = hits / reps
            print(
                f"   {name:<26} {n:>4} {corr:>5.2f} {cov[0]:>10.3f} {cov[1]:>10.3f} {cov[2]:>10.3f} "
                f"{float(np.median(ratios)):>11.2f}"
            )


def _pair_frames(folder: Path) -> dict[tuple[str, str], pd.DataFrame]:
    """Per model pair: one row per (question, turn) with GPT-4's share, the experts' mean share and vote count."""
    human = pd.read_json(folder / "human.jsonl", lines=True)
    human = human[human["judge"].str.startswith("expert_")]
    gpt4 = pd.read_json(folder / "gpt4_pair.jsonl", lines=True)
    share = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (inconsistent)": 0.5}

    def first_share(df: pd.DataFrame) -> pd.DataFrame:
        first = np.where(df["model_a"] < df["model_b"], df["model_a"], df["model_b"])
        second = np.where(df["model_a"] < df["model_b"], df["model_b"], df["model_a"])
        value = df["winner"].map(share).to_numpy(dtype="float64")
        value = np.where(df["model_a"].to_numpy() == first, value, 1.0 - value)
        return pd.DataFrame(
            {"first": first, "second": second, "question_id": df["question_id"], "turn": df["turn"], "value": value}
        )

    h = first_share(human).groupby(["first", "second", "question_id", "turn"])["value"].agg(["mean", "size"])
    g = first_share(gpt4).groupby(["first", "second", "question_id", "turn"])["value"].mean().rename("gpt4")
    joined = h.join(g, how="inner").reset_index()
    return {(a, b): part.reset_index(drop=True) for (a, b), part in joined.groupby(["first", "second"])}


def real(draws: int, ns: list[int], ci: float, seed: int) -> None:
    pairs = _pair_frames(SHARED)
    print(
        f"\n2. MT-Bench: {len(pairs)} model pairs, GPT-4 pairwise verdicts against expert votes, {draws} draws "
        f"per pair and n, {int(ci * 100)} % intervals"
    )
    sizes = [len(p) for p in pairs.values()]
    print(f"   items with expert votes per pair: min {min(sizes)}, median {int(np.median(sizes))}, max {max(sizes)}")
    gaps = [
        abs(float(p["mean"].mean()) - float((p["mean"] * p["size"]).sum() / p["size"].sum())) for p in pairs.values()
    ]
    print(f"   item mean vs vote-weighted expert win rate: largest gap {max(gaps):.3f} (the item mean is the truth)")
    print(f"   {'n':>4} {'calibrated':>10} {'human-only':>10} {'GPT-4 only':>10} {'width ratio':>11} {'min pair':>9}")
    rng = np.random.default_rng(seed)
    for n in ns:
        hits = np.zeros(3)
        total = 0
        ratios: list[float] = []
        worst = 1.0
        for part in pairs.values():
            truth = float(part["mean"].mean())
            y_all, yhat_all = part["mean"].to_numpy(), part["gpt4"].to_numpy()
            size = min(n, len(part) - 1)
            judge_mean = float(yhat_all.mean())
            judge_half = 1.959963984540054 * float(yhat_all.std()) / np.sqrt(yhat_all.size)
            judge_hit = judge_mean - judge_half <= truth <= judge_mean + judge_half
            pair_hits = 0
            for _ in range(draws):
                pick = rng.permutation(len(part))
                lab, unl = pick[:size], pick[size:]
                est = ppi_mean(y_all[lab], yhat_all[lab], yhat_all[unl], ci=ci)
                c, h = est.calibrated, est.human_only
                hit = c.ci_low <= truth <= c.ci_high
                pair_hits += hit
                hits += [hit, h.ci_low <= truth <= h.ci_high, judge_hit]
                if h.ci_high > h.ci_low:
                    ratios.append((c.ci_high - c.ci_low) / (h.ci_high - h.ci_low))
            total += draws
            worst = min(worst, pair_hits / draws)
        cov = hits / total
        print(
            f"   {n:>4} {cov[0]:>10.3f} {cov[1]:>10.3f} {cov[2]:>10.3f} {float(np.median(ratios)):>11.2f} {worst:>9.3f}"
        )


def _human_labels(rng: np.random.Generator, quality: np.ndarray, raters: int) -> np.ndarray:
    """Each item's label: the mean of ``raters`` ratings on the 0-2 scale in steps of 1/2 (as the report averages
    several raters of one item)."""
    ratings = [
        np.clip(np.round(2 * (quality + rng.normal(0.0, 0.25, quality.shape))) / 2, 0.0, 2.0) for _ in range(raters)
    ]
    return np.asarray(np.mean(ratings, axis=0))


def active_against_uniform(draws: int, ci: float, seed: int, raters: int = 1) -> None:
    big_n = 2000
    items = [f"i{k}" for k in range(big_n)]
    hard = np.arange(big_n) < big_n // 10
    uncertainty = ACTIVE_BASE + np.where(hard, 0.6, 0.03)  # the spread of the judge's samples, as a label queue sees
    rng = np.random.default_rng(seed)
    rater_text = "one rater per label" if raters == 1 else f"each label the mean of {raters} raters"
    print(
        f"\n3. active against uniform labelling: N = {big_n}, judge errors on a known tenth, {rater_text}, "
        f"{draws} draws"
    )
    print(f"   {'strategy':<8} {'n':>4} {'median width':>12} {'coverage':>8}")
    widths: dict[tuple[str, int], float] = {}
    for strategy in ("uniform", "active"):
        for n in (50, 100, 150, 200):
            w, hits = [], 0
            for r in range(draws):
                quality = np.clip(rng.normal(1.0, 0.45, big_n), 0.0, 2.0)
                human = _human_labels(rng, quality, raters)
                noise = np.where(hard, 60.0, 3.0)
                judge = np.clip(1 + 49.5 * quality + rng.normal(0.0, 1.0, big_n) * noise, 1.0, 100.0)
                queue = draw(items, n, strategy, seed=r, uncertainty=uncertainty)
                labeled = np.isin(items, queue.item_ids)
                pi = np.array([queue.inclusion[i] for i in items])
                mapped = affine_to_scale(judge, (1.0, 100.0), (0.0, 2.0))
                est = ppi_mean_active(np.where(labeled, human, np.nan), mapped, labeled, pi, ci=ci).calibrated
                w.append(est.ci_high - est.ci_low)
                hits += est.ci_low <= float(human.mean()) <= est.ci_high
            widths[(strategy, n)] = float(np.median(w))
            print(f"   {strategy:<8} {n:>4} {widths[(strategy, n)]:>12.4f} {hits / draws:>8.3f}")
    target = widths[("uniform", 100)]
    needed = np.mean([n * (widths[("active", n)] / target) ** 2 for n in (50, 100, 150, 200)])
    print(f"   labels active needs for uniform's width at n = 100: {needed:.0f} ({needed / 100:.2f}x)")
    bound = _neyman_bound(hard.mean(), rng, raters)
    print(f"   the best any inclusion rule can do here (Neyman, strata known): {bound:.2f}x")


def _neyman_bound(share_hard: float, rng: np.random.Generator, raters: int, size: int = 2_000_000) -> float:
    """Labels needed against uniform by the variance-optimal design that knows each item's stratum: inclusion
    probabilities proportional to the root mean square of the residual ``y - lam * yhat`` in the item's stratum
    (Zrnic & Candes, section 3): ``min_lam (E sqrt(E[r^2 | x]))^2 / min_lam E[r^2]``, each design with its best
    ``lam`` in [0, 1] (the variance of the population-mean part, the same for both, left out)."""
    hard = rng.random(size) < share_hard
    quality = np.clip(rng.normal(1.0, 0.45, size), 0.0, 2.0)
    human = _human_labels(rng, quality, raters)
    judge = np.clip(1 + 49.5 * quality + rng.normal(0.0, 1.0, size) * np.where(hard, 60.0, 3.0), 1.0, 100.0)
    mapped = affine_to_scale(judge, (1.0, 100.0), (0.0, 2.0))
    best_active, best_uniform = np.inf, np.inf
    for lam in np.linspace(0.0, 1.0, 101):
        r2 = (human - lam * mapped) ** 2
        rms = share_hard * np.sqrt(r2[hard].mean()) + (1 - share_hard) * np.sqrt(r2[~hard].mean())
        best_active, best_uniform = min(best_active, rms**2), min(best_uniform, float(r2.mean()))
    return float(best_active / best_uniform)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--big-n", type=int, default=1000)
    parser.add_argument("--ci", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--part", choices=["all", "simulated", "real", "active"], default="all", help="run one part only"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    if args.part in ("all", "simulated"):
        simulated(args.reps, args.big_n, [20, 50, 100], args.ci, args.seed)
    if args.part in ("all", "real"):
        real(args.draws, [25, 50, 100], args.ci, args.seed)
    if args.part in ("all", "active"):
        for raters in (1, 3):
            active_against_uniform(min(args.draws, 300), args.ci, args.seed, raters)
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
