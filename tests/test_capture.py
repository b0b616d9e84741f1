"""traceview.capture on CPU: a tiny decoder stack, traced, ingested, every layer found by annotation."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import traceview  # noqa: E402
from traceview.capture import capture, layer_modules  # noqa: E402


class TinyDecoder(torch.nn.Module):
    def __init__(self, layers: int = 3, hidden: int = 16) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, hidden)
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.LayerNorm(hidden), torch.nn.Linear(hidden, hidden), torch.nn.GELU())
            for _ in range(layers)
        )
        self.head = torch.nn.Linear(hidden, 32)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


def test_layer_modules_finds_the_decoder_layers() -> None:
    assert list(layer_modules(TinyDecoder())) == ["layers.0", "layers.1", "layers.2"]


def test_capture_on_cpu_is_ingested_with_every_layer_annotated(tmp_path: Path) -> None:
    model = TinyDecoder()
    trace = tmp_path / "tiny.pt.trace.json.gz"
    with torch.no_grad(), capture(model, trace) as session:
        for _ in range(4):
            with session.step():
                model(torch.tensor([[1, 2, 3]]))
    assert session.layer_names == ["layers.0", "layers.1", "layers.2"]
    db = tmp_path / "tiny.db"
    traceview.ingest([trace], db)
    with traceview.connect(db) as con:
        layers = con.execute(
            "SELECT name, count(*) FROM cpu_ranges WHERE name LIKE 'model.layers.%' GROUP BY name ORDER BY name"
        ).fetchall()
        steps = con.execute("SELECT count(*) FROM cpu_ranges WHERE kind = 'step'").fetchall()[0][0]
    assert layers == [("model.layers.0", 4), ("model.layers.1", 4), ("model.layers.2", 4)]
    assert steps == 4
