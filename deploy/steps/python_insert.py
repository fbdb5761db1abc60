"""``python_insert`` — insert statements into a class body, located with ``ast``.

A definition the class already has with the same AST is left alone, so a re-run is a no-op. One
with the same name and another definition is decided by ``if_exists``: ``fail`` (the default)
stops the run and names both ways out; ``keep`` leaves it, which is right for a backport, since
a later release that ships the method, with whatever body, decorators or ``async``, is already
in the desired state; ``replace`` overwrites it in place. Each name is decided on its own:
with ``keep``, the missing methods are still inserted beside the kept one. ``replace: true``,
the key's old spelling, still means ``if_exists: replace``.
"""

from __future__ import annotations

from deploy.config.steps import PythonInsertArgs
from deploy.edits.pyinsert import insert_into_class
from deploy.steps.files import EditStep


class PythonInsertStep(EditStep):
    kind = "python_insert"

    def describe(self) -> str:
        assert isinstance(self.args, PythonInsertArgs)
        return f"python_insert into {self.args.class_} in {self.args.path}"

    def edit(self, content: bytes) -> tuple[bytes, str]:
        args = self.args
        assert isinstance(args, PythonInsertArgs)
        where: str | tuple[str, str] = "end"
        if not isinstance(args.where, str):
            where = (
                ("after", args.where.after)
                if args.where.after
                else ("before", str(args.where.before))
            )
        result = insert_into_class(
            content, args.class_, args.code, where=where, if_exists=args.if_exists, path=args.path
        )
        return result.content, result.summary
