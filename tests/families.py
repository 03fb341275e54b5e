"""Tiny random targets of every family the paper and the package serve: full attention (Llama, Qwen3), mixture of
experts (Qwen3-MoE), and sliding-window or mixed layers (GPT-OSS, Mistral, Gemma-3). Windows are smaller than the
prompts the tests use, so that they matter."""

import torch


WINDOW = 6  # sliding window of the SWA families: shorter than the tests' prompts

FAMILIES = ("llama", "qwen3", "qwen3_moe", "gpt_oss", "mistral", "gemma3")
SLIDING_FAMILIES = ("gpt_oss", "mistral", "gemma3")


def family_config(family: str, vocab_size: int = 128, **overrides):
    import transformers

    common = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    extra = {
        "llama": {},
        "qwen3": {},
        "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1),
        "gpt_oss": dict(
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"] * 3,
        ),
        "mistral": dict(sliding_window=WINDOW),
        "gemma3": dict(
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
            query_pre_attn_scalar=8,
            final_logit_softcapping=30.0,
        ),
    }[family]
    classes = {
        "llama": "LlamaConfig",
        "qwen3": "Qwen3Config",
        "qwen3_moe": "Qwen3MoeConfig",
        "gpt_oss": "GptOssConfig",
        "mistral": "MistralConfig",
        "gemma3": "Gemma3TextConfig",
    }
    values = {**common, **extra, **overrides}
    return getattr(transformers, classes[family])(**values)


def make_family_target(family: str, seed: int = 0, vocab_size: int = 128, **overrides):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = family_config(family, vocab_size=vocab_size, **overrides)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    for parameter in model.parameters():  # random init with a spread that makes the outputs depend on attention
        if parameter.dim() > 1:
            torch.nn.init.normal_(parameter, std=0.2)
    return model
