"""Short SmolLM2 training runs: throughput, peak memory and the first steps' loss/acc_0 curve.

    python scripts/bench_training.py MODE HEAD_INIT STEPS [THREADS] [--data DIR]

MODE is `online` or `offline` (features), HEAD_INIT `random`, `svd` or `activation_svd`. Prints one JSON line.
"""

import argparse
import json
import resource
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["online", "offline"])
    parser.add_argument("head_init", choices=["random", "svd", "activation_svd"])
    parser.add_argument("steps", type=int)
    parser.add_argument("threads", type=int, nargs="?", default=1)
    parser.add_argument("--data", default="data/smollm2-135m-instruct/balanced_4k", help="prepare-data output")
    parser.add_argument("--out", default="/tmp/slimspec-bench-training")
    args = parser.parse_args()

    from slimspec_hf.training.config import SlimSpecConfig
    from slimspec_hf.training.data import load_training_dataset
    from slimspec_hf.training.trainer import SlimSpecTrainer

    dataset = load_training_dataset(args.data)
    config = SlimSpecConfig(
        output_dir=f"{args.out}/{args.mode}-{args.head_init}",
        overwrite_output_dir=True,
        max_steps=args.steps,
        per_device_train_batch_size=2,
        max_length=768,
        features=args.mode,
        head_init=args.head_init,
        feature_cache_dir=f"{args.out}/cache",
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        cpu_threads=args.threads,
        disable_tqdm=True,
        lr_scheduler_type="constant",
        warmup_steps=0,
        seed=0,
        data_seed=0,
    )
    start = time.perf_counter()
    trainer = SlimSpecTrainer(args=config, train_dataset=dataset)
    init_s = time.perf_counter() - start
    cache_s = 0.0
    if args.mode == "offline":
        start = time.perf_counter()
        trainer.cache_features()
        cache_s = time.perf_counter() - start
    start = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - start
    logs = [h for h in trainer.state.log_history if "acc_0" in h]
    tokens = sum(h["num_tokens"] for h in logs)
    print(
        json.dumps(
            {
                "mode": args.mode,
                "head_init": args.head_init,
                "threads": args.threads,
                "steps": args.steps,
                "init_s": round(init_s, 1),
                "cache_s": round(cache_s, 1),
                "train_s": round(train_s, 1),
                "tokens": tokens,
                "tokens_per_s": round(tokens / train_s, 1),
                "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                "curve": [(round(h["loss"], 3), h["acc_0"]) for h in logs],
            }
        )
    )


if __name__ == "__main__":
    main()
