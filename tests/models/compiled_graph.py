"""The code of the graphs dynamo captures when it compiles a module: what inductor would be given."""

from __future__ import annotations

import torch


def dynamo_graph_code(module, **inputs) -> str:
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(module, backend=backend, fullgraph=True)(**inputs)
    return "\n".join(graphs)
