"""What the model file does to start-up: the tracebacks SGLang 0.5.9 prints when it fails.

A model file that does not compile, a class without the EAGLE-3 methods in its body, a draft
model path that is neither a directory nor a repo id: each fails the start at the moment SGLang
would, with 0.5.9's frames (`sglang_traceback`), so the restart step is tested against what an
operator really reads in the log.
"""

from __future__ import annotations

import ast
import re
import traceback
from pathlib import Path

from .standin_config import EAGLE3_METHODS, HERE, MODEL_CLASS

#: (file, line, function, code) of 0.5.9's frames on the way to each failure.
_FRAMES = {
    "head": [
        ("srt/managers/scheduler.py", 3130, "run_scheduler_process", "scheduler = Scheduler("),
        ("srt/managers/scheduler.py", 368, "__init__", "self.init_model_worker()"),
    ],
    "import": [
        (
            "srt/models/registry.py",
            96,
            "import_model_classes",
            "module = importlib.import_module(name)",
        )
    ],
    "target": [
        (
            "srt/managers/tp_worker.py",
            330,
            "_init_model_runner",
            "self._model_runner = ModelRunner(",
        ),
        ("srt/model_executor/model_runner.py", 622, "initialize", "self.model.{method}("),
    ],
    "draft": [
        (
            "srt/speculative/eagle_worker.py",
            157,
            "__init__",
            "embed, head = self.target_worker.model_runner.model.{method}()",
        )
    ],
    "draft_load": [
        (
            "srt/managers/scheduler.py",
            520,
            "maybe_init_draft_worker",
            "self.draft_worker = DraftWorkerClass(",
        ),
        ("srt/speculative/eagle_worker.py", 120, "__init__", "super().__init__("),
        ("srt/configs/model_config.py", 240, "from_server_args", "return ModelConfig("),
        (
            "srt/utils/hf_transformers_utils.py",
            250,
            "get_config",
            "config = AutoConfig.from_pretrained(",
        ),
    ],
    "torch": [
        (
            "/usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py",
            1940,
            "__getattr__",
            "raise AttributeError(",
        )
    ],
}


def sglang_traceback(keys: list[str], last: str, method: str = "") -> str:
    """A traceback through SGLang's own files, ending in ``last``."""
    lines = ["Traceback (most recent call last):"]
    for file, line, function, code in (frame for key in keys for frame in _FRAMES[key]):
        lines += [
            f'  File "{HERE / file}", line {line}, in {function}',
            f"    {code.format(method=method)}",
        ]
    return "\n".join(lines) + "\n" + last.rstrip("\n")


def import_failure(model_file: Path) -> str | None:
    """The traceback of importing ``model_file`` when that fails (missing, or not compiling)."""
    if not model_file.exists():
        return sglang_traceback(
            ["head"],
            f"ValueError: Model architectures ['{MODEL_CLASS}'] "
            f"are not supported for now ({model_file} is missing).",
        )
    try:
        compile(model_file.read_bytes(), str(model_file), "exec")
    except SyntaxError as error:
        return sglang_traceback(["head", "import"], "".join(traceback.format_exception_only(error)))
    return None


def eagle3_failure(model_file: Path) -> str | None:
    """The AttributeError traceback if the class body lacks an EAGLE-3 method, else None.

    Only the class body counts: methods appended at module level after ``EntryClass`` (the
    ``cat >>`` mistake) leave the file compiling and the server dying exactly like this.
    """
    defined = {
        member.name
        for node in ast.parse(model_file.read_bytes()).body
        if isinstance(node, ast.ClassDef) and node.name == MODEL_CLASS
        for member in node.body
        if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    missing = [name for name in EAGLE3_METHODS if name not in defined]
    if not missing:
        return None
    path = "target" if missing[0] == EAGLE3_METHODS[0] else "draft"  # who calls it first
    return sglang_traceback(
        ["head", path, "torch"],
        f"AttributeError: '{MODEL_CLASS}' object has no attribute '{missing[0]}'",
        missing[0],
    )


#: What huggingface_hub accepts as a repo id (validate_repo_id), so transformers looks it up.
_REPO_ID = re.compile(r"^(\b[\w\-.]+\b/)?\b[\w\-.]+\b$")


def draft_failure(draft: str | None) -> str | None:
    """The traceback of loading the draft model, as 0.5.9's EAGLE worker does, if it fails.

    Like transformers: an existing directory is a local model and needs its ``config.json``;
    anything else must be a Hugging Face repo id (``org/name``), which the stand-in takes as
    found (it has no network). A path to a directory that is not there (``/models/draft``)
    is neither, and fails the start after the target model has loaded.
    """
    if draft is None:
        return None
    path = Path(draft).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return None
        last = (
            f"OSError: {draft} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{draft}/tree/main' for available files."
        )
    elif _REPO_ID.match(draft) and "--" not in draft and ".." not in draft:
        return None
    else:
        last = (
            f"OSError: Incorrect path_or_model_id: '{draft}'. Please provide either the path "
            "to a local folder or the repo_id of a model on the Hub."
        )
    return sglang_traceback(["head", "draft_load"], last)
