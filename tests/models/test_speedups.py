"""models/speedups.py: what ``apply_speedups`` records and how it compiles."""

from __future__ import annotations

import torch


def test_static_shapes_compile_each_layer_once_per_shape():
    """Under sequence parallelism the first decoder layer sees every position and the others 1/tp (models/parallel.py):
    with ``static_shapes`` the per-layer compile makes one static graph per shape, where dynamo's automatic dynamic
    shapes make the second shape's graph symbolic in the sequence length (it then serves a third shape too);
    compiled whole there is nothing to do, and Applied says which."""
    from hfpretrain.models import build_model, load_config
    from hfpretrain.models.speedups import Speedups, apply_speedups

    def graphs(static: bool) -> tuple[int, bool]:
        model = build_model(load_config("tiny", vocab_size=64))
        speedups = Speedups(compile="layers", compile_backend="eager", static_shapes=static)
        applied = apply_speedups(model, speedups, 64)
        torch._dynamo.utils.counters.clear()
        head = model.config.head_dim
        for length in (32, 16, 8):
            rotary = (torch.ones(1, length, head), torch.zeros(1, length, head))
            model.model.layers[0](torch.randn(2, length, model.config.hidden_size), position_embeddings=rotary)
        return torch._dynamo.utils.counters["stats"]["unique_graphs"], applied.static_shapes

    assert graphs(static=True) == (3, True)
    assert graphs(static=False) == (2, False)
    whole = Speedups(compile="decoder", compile_backend="eager", static_shapes=True)
    assert not apply_speedups(build_model(load_config("tiny", vocab_size=64)), whole, 64).static_shapes
