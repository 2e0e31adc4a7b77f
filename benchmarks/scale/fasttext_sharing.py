"""Is a fastText model shared by worker processes? Loaded before ``fork`` (copy-on-write pages) vs
loaded in each ``forkserver`` worker (what the local engine's shard workers do, docs/scaling.md).

Each of two pool workers predicts 2,000 bundled texts, then reports its RSS, PSS and private memory and the
model's load time; without ``--model`` an unquantized model is trained first.

    nice -n 19 .venv/bin/python benchmarks/scale/fasttext_sharing.py            # a 422 MiB model
    nice -n 19 .venv/bin/python benchmarks/scale/fasttext_sharing.py --model \\
        data/06_models/shared/ref-fasttext_ultrafineweb-*/fasttext_ultrafineweb.bin
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

FIRST_SHARD = sorted((Path(__file__).resolve().parents[2] / "data" / "01_raw" / "corpus").glob("*.parquet"))[0]
_MODEL = None


def memory(pid: int) -> dict[str, float]:
    fields = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        key, *value = line.split()
        if key in ("Rss:", "Pss:", "Private_Clean:", "Private_Dirty:"):
            fields[key[:-1]] = int(value[0]) / 1024
    return {"rss_mib": round(fields["Rss"], 1), "pss_mib": round(fields["Pss"], 1),
            "private_mib": round(fields["Private_Clean"] + fields["Private_Dirty"], 1)}


def predict(args: tuple[str, list[str], bool]) -> tuple[int, float, dict]:
    global _MODEL
    path, texts, load_here = args
    import fasttext

    start = time.perf_counter()
    if load_here or _MODEL is None:
        _MODEL = fasttext.load_model(path)
    seconds = time.perf_counter() - start
    time.sleep(0.5)  # both workers hold the model when they are measured
    _MODEL.predict([t.replace("\n", " ") for t in texts], k=2)
    return os.getpid(), seconds, memory(os.getpid())


def run(method: str, path: str, texts: list[str], preload: bool) -> None:
    global _MODEL
    import fasttext

    _MODEL = fasttext.load_model(path) if preload else None
    with mp.get_context(method).Pool(2) as pool:
        results = pool.map(predict, [(path, texts, not preload)] * 2, chunksize=1)
    print(f"{method}, {'loaded before the fork' if preload else 'loaded in each worker'}:")
    for pid, seconds, mem in results:
        print(f"  worker {pid}: load {seconds:.2f} s, {mem}")
    _MODEL = None


def train(bucket: int) -> str:
    import fasttext

    frame = pd.read_parquet(FIRST_SHARD, columns=["text", "source"]).head(3000)
    folder = Path(tempfile.mkdtemp(prefix="fasttext_sharing-"))
    with open(folder / "train.txt", "w") as out:
        for text, source in zip(frame["text"], frame["source"]):
            out.write(f"__label__{source} " + text.replace("\n", " ")[:2000] + "\n")
    model = fasttext.train_supervised(str(folder / "train.txt"), dim=100, bucket=bucket, epoch=1, thread=1,
                                      wordNgrams=2, verbose=0)
    model.save_model(str(folder / "model.bin"))
    return str(folder / "model.bin")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a fastText .bin (default: train an unquantized one)")
    parser.add_argument("--bucket", type=int, default=1_000_000)
    args = parser.parse_args()
    path = args.model or train(args.bucket)
    texts = pd.read_parquet(FIRST_SHARD, columns=["text"])["text"].head(2000).tolist()
    print(f"model {path}: {os.path.getsize(path) / 2**20:.0f} MiB")
    run("fork", path, texts, preload=True)
    run("forkserver", path, texts, preload=False)


if __name__ == "__main__":
    main()
