"""The published study's transcription: the tables it builds are the ones the source's README
counts and sizes."""

from __future__ import annotations

import json

import pytest

from benchmarks.published import DATA, model_tables


def test_each_transcribed_model_has_the_readmes_table_count_and_size():
    data = json.loads(DATA.read_text())
    assert data["source"]["license"] == "Apache-2.0" and "NVIDIA" in data["source"]["attribution"]
    published = [m for m in data["models"] if m["published"]]
    assert [m["name"] for m in published] == ["Tiny", "Small", "Medium", "Large", "Jumbo"]
    for model in data["models"]:
        tables = model_tables(model)
        assert len(tables) == model["readme_total_tables"], model["name"]
        gib = sum(t.rows * t.dim * 4 for t in tables) / 2**30  # fp32, as the README sizes them
        assert gib == pytest.approx(model["readme_total_embedding_size_gib"], abs=0.06), model
        assert all(p["step_ms"] > 0 and p["gpus"] >= 1 for p in model["published"])
