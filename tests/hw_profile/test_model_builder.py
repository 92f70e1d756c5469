"""The timed forward is a real verification step: it reads the KV cache at the right positions, and repeating it
repeats the same step (the cache neither grows nor moves)."""

import pytest

torch = pytest.importorskip("torch")

from hw_profile.hardware.shapes import get_shape, read_config  # noqa: E402
from hw_profile.measure import model_builder as mb  # noqa: E402


@pytest.fixture
def tiny_model(tiny_config):
    shape = get_shape(str(tiny_config))
    return mb.build_model(shape, "fp32", "cpu", base=read_config(tiny_config), max_positions=512)


def test_cached_step_equals_the_full_forward(tiny_model):
    model = tiny_model
    requests, context, tokens = 2, 24, 4
    ids = torch.randint(0, 8192, (requests, context + tokens), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        full = model(input_ids=ids).logits[:, context:]
        cache = mb.new_static_cache(model, requests, context + tokens)
        model(**mb.forward_kwargs(model, cache, ids[:, :context], 0))  # a real prefill of the context
        mb.set_cache_length(cache, context)
        step = mb.StepInputs(model, cache, context, mb.forward_kwargs(model, cache, ids[:, context:], context))
        first = step.forward()
        again = step.forward()  # the cache position went back to `context`: the same step again
    torch.testing.assert_close(first, full, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again, first)


def test_prepared_cache_is_read(tiny_model):
    model = tiny_model
    cache = mb.prepare_cache(model, requests=3, context=40, max_tokens=2)
    # layers x (K, V) x R x slots x kv_heads x head_dim x fp32 bytes
    assert sum(t.numel() * t.element_size() for t in mb.cache_tensors(cache)) == 2 * 2 * 3 * 42 * 2 * 64 * 4
    step = mb.step_inputs(model, cache, 3, 40, 2)
    with torch.inference_mode():
        before = step.forward()
        for t in mb.cache_tensors(cache):
            t[:, :, :40].mul_(-1.0)  # change what the context holds, not where
        after = step.forward()
    assert before.shape == (3, 2, 8192)
    assert (before - after).abs().max() > 1e-3


def test_attention_choices(tiny_model, tiny_config):
    import os

    from hw_profile.errors import HwProfileError

    model = tiny_model
    cache = mb.prepare_cache(model, requests=2, context=32, max_tokens=4)
    step = mb.step_inputs(model, cache, 2, 32, 4)
    with torch.inference_mode():
        plain = step.forward()
        with mb.force_sdpa_gqa(True):
            assert os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] == "1"
            grouped = step.forward()
    assert "TRANSFORMERS_SDPA_FORCE_GQA" not in os.environ
    torch.testing.assert_close(grouped, plain, rtol=1e-4, atol=1e-4)  # same attention, different kernel path
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        with pytest.raises(HwProfileError, match="--attn flash_attention_2"):
            mb.build_model(get_shape(str(tiny_config)), "fp32", "cpu", attention="flash_attention_2")


def test_a_llama_shape_builds_its_own_architecture_and_an_unknown_family_asks_for_a_config():
    from dataclasses import replace

    from hw_profile.errors import HwProfileError

    cfg = mb.transformers_config(replace(get_shape("llama-3.1-8b"), layers=2), max_positions=256)
    assert (cfg.model_type, cfg.num_key_value_heads, cfg.intermediate_size, cfg.vocab_size) == (
        "llama", 8, 14336, 128256)
    with pytest.raises(HwProfileError, match=r"pass the model's config\.json"):
        mb.transformers_config(get_shape("gpt-oss-20b"))
