"""`slimspec generate` and the generation profiler."""

import pytest
import torch

from slimspec_hf.commands.generate import main, profile_generation

from ..testing_utils import make_tiny_drafter, make_tiny_target


class _Tok:
    def decode(self, ids, **kwargs):
        return " ".join(str(int(i)) for i in ids)


def test_profile_splits_the_round_and_restores_forward():
    target = make_tiny_target()
    drafter = make_tiny_drafter(target)
    inputs = {"input_ids": torch.tensor([[1, 2, 3, 4]])}
    profile = profile_generation(target, _Tok(), inputs, drafter, max_new_tokens=20, do_sample=False)
    assert profile["new_tokens"] == 20
    assert profile["rounds"] >= 2 and profile["drafter_steps"] >= profile["rounds"] - 1
    assert 0 < profile["head_ms_per_step"] < profile["drafter_ms_per_step"]
    assert sum(profile["share"].values()) == pytest.approx(1.0)
    assert "forward" not in vars(target) and "forward" not in vars(drafter) and "forward" not in vars(drafter.lm_head)


def test_bad_max_new_tokens_is_refused():
    with pytest.raises(ValueError, match="`--max-new-tokens` must be positive, got 0"):
        main(["hi", "--drafter", "x", "--max-new-tokens", "0"])


@pytest.mark.integration
def test_generate_cli_on_smollm2(tmp_path, embedded_target, capsys):
    from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM

    model, _ = embedded_target
    torch.manual_seed(0)
    drafter = SlimSpecDrafterForCausalLM(SlimSpecDrafterConfig.from_target_config(model.config))
    drafter.lm_head.init_from_dense(model.lm_head.weight)
    drafter.save_pretrained(tmp_path)
    code = main(["What is 2 + 2?", "--drafter", str(tmp_path), "--max-new-tokens", "12", "--compare", "--profile"])
    out = capsys.readouterr().out
    assert code == 0
    assert "tokens/s" in out and "(identical text)" in out and "[profile] per round" in out
