"""The step-time model (hfpretrain.models.step_time) against every measured multi-GPU point, its formulas on
hand-computable cases, and its refusals."""

import json
from pathlib import Path

import pytest

from hfpretrain.models import count_params, load_config
from hfpretrain.models.step_time import (
    ASSUMED_MFU,
    BUS_EFFICIENCY,
    LINKS,
    RESIDUAL_BYTES,
    StepTimeRequest,
    exposed,
    predict,
    table,
)

POINTS = json.loads((Path(__file__).parent / "assets" / "step_time_points.json").read_text())["points"]
TOLERANCE = 0.10
SHAPE = "qwen3_1p8b"


def _predict(point: dict):
    return predict(
        StepTimeRequest(
            point["shape"],
            point["gpu"],
            point["num_gpus"],
            point["nodes"],
            point["layout"],
            dtype=point["dtype"],
            tp=point.get("tp", 1),
            cp=point.get("cp", 1),
            seq_len=point.get("seq_len", 2048),
            micro_batch=point["micro_batch"],
            one_gpu_tokens_per_s=point["one_gpu_tokens_per_s"],
            inter_node_gbit_s=point.get("inter_node_gbit_s"),
            vocab_size=point.get("vocab_size"),
        )
    )


@pytest.mark.parametrize("point", POINTS, ids=[p["name"] for p in POINTS])
def test_every_measured_point_within_ten_percent(point):
    predicted = _predict(point).tokens_per_s
    error = predicted / point["tokens_per_s"] - 1
    if "outside" in point:  # not explained, and said so: the model over-predicts it by the range its reason gives
        low, high = point.get("error_range", (TOLERANCE, 0.15))
        assert error > max(low, TOLERANCE), (point["name"], error, "now within: drop its 'outside'")
        assert error < high, (point["name"], error)
        return
    assert abs(error) <= TOLERANCE, (point["name"], predicted, point["tokens_per_s"], f"{error:+.1%}")


def test_one_gpu_is_the_one_gpu_figure():
    one = predict(StepTimeRequest(SHAPE, "H200", 1, layout="zero1", micro_batch=20))
    assert one.efficiency == pytest.approx(1) and sum(one.comm_s.values()) == 0
    assert one.one_gpu_mfu == one.mfu == 0.585 and one.one_gpu_source.startswith("measured")
    assert predict(StepTimeRequest(SHAPE, "B200", 8)).one_gpu_mfu == ASSUMED_MFU  # no B200 measurement
    given = predict(StepTimeRequest(SHAPE, "H200", 1, one_gpu_tokens_per_s=50_000.0, micro_batch=20))
    assert given.tokens_per_s == pytest.approx(50_000)
    assert given.compute_per_micro_batch_s == pytest.approx(20 * 2048 / 5e4)


def test_ring_bytes_and_links_by_hand():
    params = count_params(load_config(SHAPE)).total
    nvlink = BUS_EFFICIENCY * LINKS["H200"][0] * 1e9
    ddp = predict(StepTimeRequest(SHAPE, "H200", 2, layout="ddp", micro_batch=20, one_gpu_mfu=0.5))
    assert ddp.comm_s["all-reduce grads fp32"] == pytest.approx(2 * (1 / 2) * 4 * params / nvlink)
    zero1 = predict(StepTimeRequest(SHAPE, "H200", 4, layout="zero1", micro_batch=20, one_gpu_mfu=0.5))
    gather = (3 / 4) * 2 * params / nvlink
    assert zero1.exposed_s["all-gather weights bf16"] == pytest.approx(gather)  # after the step: never hidden
    assert zero1.exposed_s["reduce-scatter grads bf16"] == pytest.approx(gather * 5e8 / params)  # the last bucket
    assert zero1.step_s == pytest.approx(zero1.compute_per_micro_batch_s + sum(zero1.exposed_s.values()))
    # across nodes the ring runs at the slower link: 400 Gbit/s = 50 GB/s, x 0.8
    two_nodes = predict(StepTimeRequest(SHAPE, "B200", 16, 2, "fsdp2", micro_batch=22))
    assert two_nodes.link_gb_s == pytest.approx(BUS_EFFICIENCY * 400 / 8)
    assert predict(StepTimeRequest(SHAPE, "B200", 8, micro_batch=22)).link_gb_s == pytest.approx(0.8 * 900)
    # compute: micro_batch * S * F / (peak * MFU)
    from hfpretrain.models import flops_per_token, peak_flops

    t = 20 * 2048 * flops_per_token(load_config(SHAPE), 2048).total / (peak_flops("H200") * 0.5)
    assert ddp.compute_per_micro_batch_s == pytest.approx(t)


def test_overlap_rule_and_accumulation():
    assert exposed(10.0, 4.0, 1.0) == 6.0  # the part beyond the window
    assert exposed(10.0, 40.0, 1.0) == 1.0  # the tail
    one = predict(StepTimeRequest(SHAPE, "B200", 16, 2, "zero1", micro_batch=22, grad_accum=1))
    four = predict(StepTimeRequest(SHAPE, "B200", 16, 2, "zero1", micro_batch=22, grad_accum=4))
    assert four.exposed_s == pytest.approx(one.exposed_s)  # once per step: amortised over the micro-batches
    assert four.efficiency > one.efficiency and four.tokens_per_step == 4 * one.tokens_per_step
    fsdp = predict(StepTimeRequest(SHAPE, "B200", 16, 2, "fsdp2", micro_batch=22, grad_accum=4))
    fsdp_one = predict(StepTimeRequest(SHAPE, "B200", 16, 2, "fsdp2", micro_batch=22))
    gather = "all-gather weights forward"
    assert fsdp.comm_s[gather] == pytest.approx(4 * fsdp_one.comm_s[gather])  # every micro-batch


def test_tensor_and_context_parallel_bytes():
    config = load_config(SHAPE)
    nvlink = BUS_EFFICIENCY * LINKS["H200"][0] * 1e9
    tp = predict(StepTimeRequest(SHAPE, "H200", 4, layout="fsdp2", tp=2, micro_batch=20, one_gpu_mfu=0.5))
    per_allreduce = 2 * (1 / 2) * 20 * 2048 * config.hidden_size * 2 / nvlink
    assert tp.exposed_s["tp all-reduce activations"] == pytest.approx(4 * config.num_hidden_layers * per_allreduce)
    assert tp.dp == 2 and tp.tokens_per_step == 2 * 20 * 2048
    # the residual stream's work stays whole on each tp rank; the rest of one GPU's micro-batch is halved
    t_1 = predict(StepTimeRequest(SHAPE, "H200", 1, micro_batch=20, one_gpu_mfu=0.5)).compute_per_micro_batch_s
    t_res = 20 * 2048 * config.num_hidden_layers * config.hidden_size * RESIDUAL_BYTES / (0.8 * 4.8e12)
    assert tp.compute_per_micro_batch_s == pytest.approx((t_1 - t_res) / 2 + t_res)
    cp = predict(StepTimeRequest(SHAPE, "H200", 2, layout="fsdp2", cp=2, seq_len=32768, micro_batch=1))
    block = 32768 / 2 * 2 * config.num_key_value_heads * config.head_dim * 2
    assert cp.comm_s["cp ring K,V"] == pytest.approx(config.num_hidden_layers * 3 * block / nvlink)
    assert cp.dp == 1 and cp.tokens_per_step == 32768


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(gpu="Z100"), "unknown GPU 'Z100'"),
        (dict(layout="zero3"), "layout must be one of ddp, zero1, fsdp2"),
        (dict(num_gpus=8, nodes=3), "nodes: 3 nodes do not divide 8 GPUs"),
        (dict(num_gpus=16, tp=16), "tp=16 does not divide the model's 16 attention heads and 8 KV heads"),
        # as the run refuses them (the same check, or the same words): the plan predicts no layout the run refuses
        (dict(shape="gpt2_124m", num_gpus=2, layout="fsdp2", tp=2), "tp=2: transformers has no tensor-parallel plan"),
        (dict(shape="qwen3_moe_856m_a152m", num_gpus=2, layout="fsdp2", tp=2), "no tensor-parallel plan for qwen3_moe"),
        (dict(num_gpus=2, layout="fsdp2", tp=2, dtype="fp8"), "precision: fp8 with tp 2: torchao's float8"),
        (dict(num_gpus=2, layout="fsdp2", cp=2, seq_len=1002), "must split into 2 x cp = 4 equal chunks"),
        (dict(num_gpus=8, tp=3), "tp: tp x cp = 3 must divide the 8 GPUs of a node"),
        (dict(num_gpus=4, layout="zero1", tp=2), "tp: ZeRO-1"),
        (dict(gpu="A100", num_gpus=2, layout="ddp", tp=2, intra_node_gb_s=300), "gpu: no HBM bandwidth for A100"),
        (dict(num_gpus=4, layout="ddp", tp=2), "layout: ddp with tp > 1: accelerate composes"),
        (dict(num_gpus=2, layout="ddp", cp=2), "layout: ddp with cp > 1"),
        (dict(gpu="A100"), "gpu: no default link bandwidths for A100"),
        (dict(one_gpu_mfu=1.5), "one_gpu_mfu must be a fraction"),
        (dict(num_gpus=0), "num_gpus must be an integer >= 1"),
    ],
)
def test_bad_input_is_one_line_naming_it(kwargs, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")) as err:
        predict(StepTimeRequest(**{"shape": SHAPE, "gpu": "H200", **kwargs}))
    assert "\n" not in str(err.value)


def test_plan_prints_predictions_and_errors(capsys):
    from hfpretrain.cli.plan import main

    assert (
        main(
            [
                "--gpu",
                "B200",
                "--num-gpus",
                "16",
                "--nodes",
                "2",
                "--layout",
                "zero1,fsdp2",
                "--shape",
                SHAPE,
                "--micro-batch",
                "22",
                "--global-batch-tokens",
                "720896",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("PREDICTIONS") and "\nzero1     16     2" in out and "\nfsdp2     16     2" in out
    assert "720,896" in out and "MFU 40.0% (assumed" in out
    for argv, words in [
        (["--nodes", "3"], "error: nodes: 3 nodes do not divide 8 GPUs"),
        (["--layout", "zero3"], "error: layout must be one of"),
        (["--tp", "16", "--num-gpus", "16"], "error: tp=16 does not divide"),
        (["--gpu", "Z100"], "error: unknown GPU 'Z100'"),
        (["--micro-batch", "0"], "error: --micro-batch must be an integer >= 1, got 0"),  # was a ZeroDivisionError
        (["--grad-accum", "0"], "error: --grad-accum must be an integer >= 1, got 0"),  # was taken as the default
    ]:
        base = {"--gpu": "H200", "--num-gpus": "8", "--layout": "fsdp2", "--shape": SHAPE}
        base.update(dict(zip(argv[::2], argv[1::2])))
        assert main([x for kv in base.items() for x in kv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(words) and err.count("\n") == 1, err
    assert main(["--gpu", "H200"]) == 2 and "--hours is required" in capsys.readouterr().err
    assert main(["--gpu", "H200", "--layout", "ddp"]) == 2 and "--shape is required" in capsys.readouterr().err
    # the compute plan picks its own shapes: a --shape without --layout was silently ignored
    assert main(["--gpu", "H200", "--hours", "1", "--shape", "gpt2_124m"]) == 2
    assert "--shape is read with --layout only" in capsys.readouterr().err


def test_table_marks_predictions():
    text = table(
        [
            predict(StepTimeRequest(SHAPE, "B200", 8, layout=lay, micro_batch=22, grad_accum=2))
            for lay in ("zero1", "fsdp2")
        ]
    )
    assert text.splitlines()[0].startswith("PREDICTIONS") and "not measurements" in text.splitlines()[0]
    tp = table([predict(StepTimeRequest(SHAPE, "H200", 2, layout="ddp", tp=2, micro_batch=20))])
    assert "cp:" not in text and "cp:" not in tp  # measured within 10%: no caveat
    cp = table([predict(StepTimeRequest(SHAPE, "H200", 2, layout="fsdp2", cp=2, seq_len=32768, micro_batch=1))])
    assert cp.splitlines()[-1].startswith("cp: an upper bound, not yet a prediction")


def test_documented_predictions_are_what_the_commands_print(capsys):
    """docs/models.md § Step-time model: each command prints the tokens/s its table states."""
    import re
    import shlex

    from hfpretrain.cli.plan import main

    doc = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = doc[doc.index("## Step-time model") :]
    commands = re.findall(r"^    (hfpretrain plan .+)$", section, flags=re.M)
    assert len(commands) == 3
    for cmd in commands:
        assert main(shlex.split(cmd)[2:]) == 0
        for line in capsys.readouterr().out.splitlines():
            if line.startswith(("zero1", "fsdp2")):
                tokens_per_s = line.split()[12]
                assert f"| {tokens_per_s} |" in section, (cmd, line)


def test_the_documented_table_is_what_the_model_predicts():
    """docs/models.md § Step-time model's table "Against every measurement": one row per point of
    step_time_points.json, in its order, each figure what the model gives now."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    table_text = doc[doc.index("| point | one GPU | measured tokens/s") :].split("\n\n")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table_text.splitlines()[2:]]
    assert len(rows) == len(POINTS)
    for cells, point in zip(rows, POINTS):
        st = _predict(point)
        error = st.tokens_per_s / point["tokens_per_s"] - 1
        measured_eff = point["tokens_per_s"] / (point["num_gpus"] * point["one_gpu_tokens_per_s"])
        expected = [
            f"{point['one_gpu_tokens_per_s']:,}",
            f"{point['tokens_per_s']:,}",
            f"{st.tokens_per_s:,.0f}",
            f"{error:+.1%}".replace("-", "−"),
            f"{measured_eff:.1%} / {st.efficiency:.1%}",
        ]
        assert [c.replace("**", "") for c in cells[1:]] == expected, (point["name"], cells)
