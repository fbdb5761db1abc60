"""``python_insert`` — insert statements into a class body, located with ``ast``."""

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
