"""Record `capture_graph.pt.trace.json.gz`: the eager decoder captured as a CUDA graph *inside*
`traceview.capture`, then replayed.

Annotations do not fire when a graph replays, but they do while it is captured: traceview.capture's layer
ranges surround the launches recorded during capture, and traceview's segmentation maps each replayed
kernel to the layer of the capture-time launch in the same position (method `graph`). The eager trace
(`eager.pt.trace.json.gz`, annotated on every step) is the truth: 46 kernels in layer 0, 67 in the others.

    python sample_traces/record_capture.py --out DIR   # on a CUDA GPU; needs traceview importable
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # the sample model: generate.py beside this file

from traceview.capture import capture


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    lm = generate.build(argparse.Namespace(seed=args.seed, layers=args.layers), device)
    decoder = generate.Decoder(lm, device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):  # warm-up outside the graph, as CUDA graph capture requires
            decoder.step(annotate=False)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    decoder.reset()
    args.out.mkdir(parents=True, exist_ok=True)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), capture(lm, args.out / "capture_graph.pt.trace.json.gz") as session:
        with torch.cuda.graph(graph):
            decoder.step(annotate=False)  # traceview.capture's hooks annotate each layer during capture
        torch.cuda.synchronize()
        for _ in range(args.steps):
            with session.step():
                graph.replay()
                torch.cuda.synchronize()
    print(f"layers annotated: {session.layer_names}; steps: {session.steps}; token: {int(decoder.tok)}")


if __name__ == "__main__":
    main()
