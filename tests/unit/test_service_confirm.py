"""The restarted server must confirm the declared speculative settings (issue 31, point 6)."""

from __future__ import annotations

from deploy.services.confirm import describe_stack, expected_settings, settings_problem, stack


def test_what_the_restart_declared_is_what_server_info_must_say() -> None:
    declared = {
        "--speculative-algorithm": "EAGLE3",
        "--speculative-draft-model": "/models/draft",  # 0.5.9's alias
        "--speculative-num-draft-tokens": 4,  # SGLang may adjust it: not compared
    }
    expected = expected_settings(declared)
    assert expected == {
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "/models/draft",
    }
    good = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/draft/"}
    assert settings_problem("sglang", good, expected) is None
    lost = {"speculative_algorithm": None, "speculative_draft_model_path": None}
    problem = settings_problem("sglang", lost, expected)
    assert problem is not None
    assert "speculative_algorithm is None, not 'EAGLE3'" in problem
    assert "speculative_draft_model_path is None, not '/models/draft'" in problem
    removed = expected_settings({}, ["--speculative-algorithm"])
    assert removed == {"speculative_algorithm": None}
    assert settings_problem("sglang", good, removed) is not None
    assert settings_problem("sglang", lost, removed) is None
    assert expected_settings({"--speculative-algorithm": False}) == {"speculative_algorithm": None}


def test_the_stack_figures_and_their_line() -> None:
    figures = stack({"version": "0.5.9"}, {"torch": "2.9.1", "cuda": "12.9"}, "580.159.04")
    assert figures == {
        "sglang_version": "0.5.9",
        "torch_version": "2.9.1",
        "cuda_version": "12.9",
        "driver_version": "580.159.04",
    }
    assert describe_stack(figures) == "SGLang 0.5.9, torch 2.9.1 (CUDA 12.9), driver 580.159.04"
    assert stack({}, {}, None) == {} and describe_stack({}) == ""
