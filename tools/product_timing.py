"""How long onnxruntime-web takes for one int8 linear layer of one row, as the page's decoder step runs them,
with the weight as ``quantize_dynamic`` writes it and widened by ``aiayn.export.graphs._unaliased_rows``.

    python tools/product_timing.py [--rounds 15] [--out src/aiayn/results/product_timing.json]

For each shape of the step's layers (d_model x d_model, d_model x d_ff, d_ff x d_model) it writes a float32
graph of ``x W + b`` with a random W, quantizes it as ``quantize_graphs`` does, and a copy whose rows are
``ROW_PADDING`` columns wider (whatever their length, so that the rows 512 bytes long are timed widened too).
``tools/product_timing.mjs`` runs both in Node (onnxruntime-web, one WebAssembly thread), interleaved in rounds
(plain, wide, then wide, plain), checks that they give the same numbers, and reports the microseconds of one
run. Printed: each shape's median and range, and the median and range of the per-round ratios wide / plain.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from aiayn.export import graphs  # noqa: E402

SHAPES = [(512, 512), (512, 2048), (2048, 512)]  # the base model's d_model and d_ff


def layer_graph(K: int, N: int, path: Path) -> None:
    """A float32 graph of one linear layer ``x (rows, K) -> x W + b (rows, N)``, W and b random."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    b = (rng.standard_normal(N) * 0.1).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xW"]), helper.make_node("Add", ["xW", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", N])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # what onnxruntime-web reads
    onnx.save(model, str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, help="also write the record as JSON here")
    args = parser.parse_args()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for K, N in SHAPES:
            layer_graph(K, N, folder / f"{K}x{N}.onnx")
            plain, wide = folder / f"{K}x{N}.plain.onnx", folder / f"{K}x{N}.wide.onnx"
            quantize_dynamic(folder / f"{K}x{N}.onnx", plain, weight_type=QuantType.QInt8)
            wide.write_bytes(plain.read_bytes())
            if graphs._unaliased_rows(wide, row=N) != 1:
                raise SystemExit(f"{wide.name}: expected one layer widened")
        load_before = os.getloadavg()[0]
        run = subprocess.run(
            ["node", str(ROOT / "tools" / "product_timing.mjs"), str(folder), str(args.rounds),
             *(f"{K}x{N}" for K, N in SHAPES)],
            cwd=ROOT, check=True, capture_output=True, text=True,
        )  # fmt: skip
        load_after = os.getloadavg()[0]
    found = json.loads(run.stdout)
    layers = {}
    print(f"one row through an int8 linear layer, onnxruntime-web {found['ort']} in Node, one WebAssembly thread, "
          f"{args.rounds} rounds interleaved; {platform.machine()}, {os.cpu_count()} cores, "
          f"load {load_before:.2f} before, {load_after:.2f} after")  # fmt: skip
    for shape, times in found["us"].items():
        ratios = [w / p for p, w in zip(times["plain"], times["wide"], strict=True)]
        layers[shape] = {
            "us": times,
            "median_us": {k: round(statistics.median(v), 1) for k, v in times.items()},
            "wide_over_plain": {"median": round(statistics.median(ratios), 3),
                                "range": [round(min(ratios), 3), round(max(ratios), 3)]},
        }  # fmt: skip
        m = layers[shape]["median_us"]
        print(f"  {shape:>9}: plain {m['plain']:6.1f} us, {graphs.ROW_PADDING} columns wider {m['wide']:6.1f} us; "
              f"wide / plain median {statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f})")
    if args.out:
        record = {
            "what": "microseconds of one run of an int8 linear layer (one row, DynamicQuantizeLinear + MatMulInteger "
            "as quantize_dynamic writes it) in onnxruntime-web on one WebAssembly thread, its weight as written "
            f"and {graphs.ROW_PADDING} columns wider (aiayn.export.graphs._unaliased_rows), interleaved in rounds",
            "onnxruntime_web": found["ort"],
            "node": found["node"],
            "rounds": args.rounds,
            "layers": layers,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other jobs",
            "load_average": [round(load_before, 2), round(load_after, 2)],
            "command": f"python tools/product_timing.py --rounds {args.rounds} --out {args.out}",
            "measured_at": date.today().isoformat(),
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
