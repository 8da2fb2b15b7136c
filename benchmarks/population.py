"""Populations (``run.population``, docs/population.md): N seeds of a config trained as one batched model,
against the same N seeds as N single runs one after another, and one single run. Every arm is a fit in a
fresh process (one torch thread), run one after another in this one invocation, so all arms see the same
machine load. Reports each arm's wall time (whole fit) and training time (evaluations excluded), the final
evaluation return of every seed (``EVAL_EPISODES`` deterministic episodes), mean and IQM with bootstrap
CIs (``score_summary``), and a two-sided Mann-Whitney U test of population members against single runs.

Member ``k`` of a population with ``env.seed = s`` is the run of seed ``s + k * env.num_envs``
(``seed_everything`` and ``env.seed``); the single runs use exactly those seeds.

    python benchmarks/population.py --config configs/ppo/cartpole.yaml --seeds 8 [--total-env-steps 50000]
        [--backend torch] [--single-runs 4]

``--single-runs K`` trains only the first K seeds' single runs (a population of 32 next to 32 runs one after
another costs hours here): the time of all N single runs is then K's scaled by N / K, and says so.
``--ddp-ranks W`` adds an arm: the same population split across W DDP ranks on this machine's CPU (gloo, one
torch thread each; ``run.population_ddp: split``, each rank training N / W members).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from common import EVAL_EPISODES, EvalClock, child_env, child_result, load_config, make_model, quiet_trainer


def worker(spec: dict) -> dict | None:
    """One fit: ``population`` members from ``seed`` (1: a single run of ``seed``), over ``ranks`` DDP ranks
    (the other ranks, started by Lightning with this command line, return ``None``)."""
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy

    cls, init, _ = load_config(spec["config"])
    env = {"seed": spec["seed"], **({"backend": spec["backend"]} if spec["backend"] else {})}
    overrides = {"total_env_steps": spec["total_env_steps"]} if spec["total_env_steps"] else {}
    L.seed_everything(spec["seed"], verbose=False)
    model = make_model(cls, init, env=env, eval_episodes=EVAL_EPISODES, population=spec["population"], **overrides)
    clock = EvalClock()
    ranks = spec.get("ranks", 1)
    ddp = {"accelerator": "cpu", "devices": ranks, "strategy": DDPStrategy(process_group_backend="gloo")}
    trainer = quiet_trainer(callbacks=[clock], log_every_n_steps=10, **(ddp if ranks > 1 else {}))
    start = time.perf_counter()
    clock.start()
    trainer.fit(model)
    wall = time.perf_counter() - start
    metrics = trainer.callback_metrics
    if trainer.global_rank > 0:
        return None
    if spec["population"] == 1:
        returns = [float(metrics["val/episode_return"])]
    else:
        returns = [float(metrics[f"member_{k}/val/episode_return"]) for k in range(spec["population"])]
    return {"wall_s": wall, "train_s": clock.train_time(), "env_steps": model.env_steps, "returns": returns}


def arm(spec: dict) -> dict:
    cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
    what = f"population={spec['population']} seed={spec['seed']} ranks={spec.get('ranks', 1)}"
    return child_result(cmd, child_env(OMP_NUM_THREADS="1"), what)


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    from scipy import stats

    if a == b or (len(set(a)) == 1 and set(a) == set(b)):
        return 1.0
    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/ppo/cartpole.yaml")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1, help="env.seed of the population (member 0's seed)")
    parser.add_argument("--total-env-steps", type=int, default=None, help="per run / member; default: the config's")
    parser.add_argument("--backend", default=None, help="env.backend (default: the config's)")
    parser.add_argument("--single-runs", type=int, default=None, help="train only this many single runs (scaled)")
    parser.add_argument("--ddp-ranks", type=int, default=1, help="add the population split across this many ranks")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if (result := worker(json.loads(args.worker))) is not None:
            print(json.dumps(result))
        return
    from rl_lightning.plotting import score_summary

    _, init, _ = load_config(args.config)
    seeds = [args.seed + k * init["env"].num_envs for k in range(args.seeds)]  # the members' seeds
    base = dict(config=args.config, total_env_steps=args.total_env_steps, backend=args.backend)
    population = arm({**base, "population": args.seeds, "seed": args.seed})
    split = (
        arm({**base, "population": args.seeds, "seed": args.seed, "ranks": args.ddp_ranks})
        if args.ddp_ranks > 1
        else None
    )
    singles = [arm({**base, "population": 1, "seed": seed}) for seed in seeds[: args.single_runs]]
    single_returns = [r for s in singles for r in s["returns"]]
    scale = args.seeds / len(singles)  # 1 unless --single-runs
    rows = [
        ("population", population["wall_s"], population["train_s"], population["returns"]),
        (
            f"{args.seeds} single runs" + (f" (scaled from {len(singles)})" if scale != 1 else ""),
            scale * sum(s["wall_s"] for s in singles),
            scale * sum(s["train_s"] for s in singles),
            single_returns,
        ),
        (
            "one single run (mean)",
            sum(s["wall_s"] for s in singles) / len(singles),
            sum(s["train_s"] for s in singles) / len(singles),
            None,
        ),
    ]
    if split is not None:
        rows.insert(1, (f"population, {args.ddp_ranks} DDP ranks", split["wall_s"], split["train_s"], split["returns"]))
    print(f"config {args.config}, {population['env_steps']} env steps per run, backend {args.backend or 'config'}")
    print(f"seeds {seeds}")
    for name, wall, train, returns in rows:
        line = f"{name:24s} wall {wall:7.1f} s  train {train:7.1f} s"
        if returns is not None:
            summary = score_summary(returns)
            line += (
                f"  mean {summary['mean']:.1f} [{summary['mean_ci'][0]:.1f}, {summary['mean_ci'][1]:.1f}]"
                f"  IQM {summary['iqm']:.1f} [{summary['iqm_ci'][0]:.1f}, {summary['iqm_ci'][1]:.1f}]"
                f"  returns {[round(r, 1) for r in returns]}"
            )
        print(line)
    one = rows[-1][1]
    print(
        f"population wall / one single run: {population['wall_s'] / one:.2f}x; "
        f"{args.seeds} single runs / population: {rows[-2][1] / population['wall_s']:.2f}x"
    )
    p_value = mann_whitney_p(population["returns"], single_returns)
    print(f"Mann-Whitney U (two-sided), members vs single runs: p = {p_value:.3f}")
    if split is not None:
        print(
            f"population on {args.ddp_ranks} DDP ranks: wall / one single run {split['wall_s'] / one:.2f}x, "
            f"train / one single run {split['train_s'] / rows[-1][2]:.2f}x; Mann-Whitney U, its members vs single "
            f"runs: p = {mann_whitney_p(split['returns'], single_returns):.3f}"
        )


if __name__ == "__main__":
    main()
