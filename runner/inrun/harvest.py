"""What a run returns besides its output, gathered inside the run once its code has ended: the value
of its last expression, its figures and the files it made or changed, within the call's budgets,
written to the server as one report on the job socket (fd 3).

Standard library only: loaded by the bootstrap (`bootstrap.load_siblings`) and run under the run's
limits, so whatever the code left (a ``__repr__`` that never returns, a figure of 400 million
pixels, a file that keeps growing) costs the run, not the server. The server trusts none of it: it
checks every number and byte of the report again (`runner.execution.report`). The report's frame,
and the budgets, are the wire's (`wire`).
"""

from __future__ import annotations

import _ast  # the compiler's own node classes: `ast`, the module around them, is not needed here
import os
import resource
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import CodeType, ModuleType
    from typing import Any

    from runner.inrun import wire
elif __package__:  # the server's import, as runner.inrun.harvest
    from runner.inrun import wire
else:  # in a run: from this directory (`bootstrap.load_siblings`)
    import wire

MAX_OMITTED, MAX_FILES, MAX_NAME_CHARS = wire.MAX_OMITTED, wire.MAX_FILES, wire.MAX_NAME_CHARS
MAX_LINKED = wire.MAX_LINKED
# Bound as this module loads, before any code of a session's: a session's call forked ahead compiles
# "x" this way while sealed (`bootstrap.warm_up`), and `_ast.Expr = C` must not run there (found by a second
# look); the classes themselves are put back while sealed (`library.LIBRARY_CLASSES`).
_ONLY_AST, _Expr, _Expression = _ast.PyCF_ONLY_AST, _ast.Expr, _ast.Expression


def split_last_expression(text: str, filename: str) -> tuple[CodeType, CodeType | None]:
    """The code compiled as a module, and its last statement compiled apart when it is an expression.

    As in a notebook, an expression whose line ends with ``;`` is not a value to show. Errors are
    those of ``compile(text, filename, "exec")``.
    """
    tree = compile(text, filename, "exec", flags=_ONLY_AST, dont_inherit=True)
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, _Expr) or _silenced(text, last):
        return compile(tree, filename, "exec", dont_inherit=True), None
    tree.body.pop()
    expression = _Expression(last.value)
    return (
        compile(tree, filename, "exec", dont_inherit=True),
        compile(expression, filename, "eval", dont_inherit=True),
    )


def _silenced(text: str, statement: _ast.stmt) -> bool:
    # The compiler's line breaks only: str.splitlines() also breaks at \x0c, \u2028 and the like.
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    end_line, end_column = statement.end_lineno, statement.end_col_offset
    if end_line is None or end_column is None or end_line > len(lines):
        return False
    rest = lines[end_line - 1].encode("utf-8")[end_column:]  # offsets count UTF-8 bytes
    return rest.lstrip().startswith(b";")


def describe_value(value: object, max_chars: int) -> tuple[str, int]:
    """``repr(value)`` cut to `max_chars`, and its whole length; a ``__repr__`` that fails says so."""
    try:
        text = repr(value)
        if not isinstance(text, str):
            raise TypeError(f"__repr__ returned {type(text).__name__}")
    except Exception as exc:
        text = f"<repr() of a {_type_name(value)} failed: {_exception_text(exc)}>"
    return text[:max_chars], len(text)


def _type_name(value: object) -> str:
    try:
        return type(value).__name__
    except Exception:
        return "value"


def _exception_text(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"[:500]
    except Exception:
        return type(exc).__name__


class Report:
    """Everything the run returns besides its output, within `budgets`, in the order it was found."""

    def __init__(self, budgets: wire.Budgets) -> None:
        self.budgets = budgets
        self.result: str | None = None
        self.result_chars = 0
        self.table: bytes | None = None  # the last value's first rows as JSON (`tables.table_of`)
        self.images: list[dict[str, Any]] = []
        self.files: list[dict[str, Any]] = []
        self.omitted: list[dict[str, Any]] = []
        self.more_omitted = 0
        self.blobs: list[bytes] = []
        self.bytes_left = budgets.call_bytes
        self.file_bytes_left = budgets.file_bytes
        # Over a budget but within `kept_bytes`: sent after the blobs, for the server to keep and link.
        self.linked: list[dict[str, Any]] = []
        self.linked_blobs: list[bytes] = []
        self.kept_bytes_left = budgets.kept_bytes
        self._header: bytes | None = None  # made by `header`, once all is gathered

    def add_table(self, table: bytes | None) -> None:
        """The last value's table, which the call's bytes pay for as they pay for a figure."""
        if table is not None and len(table) <= self.bytes_left:
            self.table = table
            self.bytes_left -= len(table)

    def omit(self, name: str, size: int, reason: str) -> None:
        if len(self.omitted) < MAX_OMITTED:
            if len(name) > MAX_NAME_CHARS:  # as the server takes it: the name's start, and that it was cut
                name = name[: MAX_NAME_CHARS - 20] + "... (name cut)"
            self.omitted.append({"name": name, "bytes": size, "reason": reason})
        else:
            self.more_omitted += 1

    def add_figure(self, name: str, png: bytes | None, note: str, full: bytes | None = None) -> None:
        """A figure: `png` to show (None: none fits), and `full`, its render at full size when `png`
        is a smaller one made to fit the image budget (or there is none), to keep and link."""
        if png is not None and len(png) > self.bytes_left:
            reason = f"over what is left of the call's {self.budgets.call_bytes:,}-byte budget"
            if not self.link(name, png, reason):
                self.omit(name, len(png), self.not_linked(reason, len(png)))
        elif png is not None:
            self.images.append({"name": name, "bytes": len(png), "note": note})
            self.blobs.append(png)
            self.bytes_left -= len(png)
        if full is not None:
            stem = name[:-4] if name.endswith(".png") else name
            reason = f"full size; over the {self.budgets.image_bytes:,}-byte image budget"
            if not self.link(f"{stem}-full.png", full, reason) and png is None:
                self.omit(name, len(full), note)
        elif png is None:
            self.omit(name, 0, note)

    def not_linked(self, reason: str, size: int) -> str:
        """`reason`, and why an output over it is not linked instead either (a first hour: a file left
        out once the kept bytes were spent said only the call's budget, as the one linked before it did)."""
        if not self.budgets.kept_bytes:  # nothing is kept on this server: nothing to say of it
            return reason
        if len(self.linked) >= MAX_LINKED:
            return f"{reason}; and {MAX_LINKED} outputs are linked already"
        if size > self.kept_bytes_left:
            kept = self.budgets.kept_bytes
            return f"{reason}; and over what is left of the {kept:,} bytes kept to link (RUNNER_MAX_KEPT_OUTPUT_MB)"
        return reason

    def link(self, name: str, data: bytes, reason: str) -> bool:
        """Send `data` for the server to keep and link, if the kept budget has room for it."""
        if len(data) > self.kept_bytes_left or len(self.linked) >= MAX_LINKED:
            return False
        self.linked.append({"name": name, "bytes": len(data), "reason": reason})
        self.linked_blobs.append(data)
        self.kept_bytes_left -= len(data)
        return True

    def add_files(
        self,
        entries: Iterator[tuple[str, os.stat_result | None]],
        inputs: dict[str, tuple[int, int, int, int]],
        read: Callable[[str, os.stat_result, int], bytes | None],
        image_headers: ModuleType,
    ) -> None:
        """The files the code made or changed: `entries` from `workdir.walk`, read with `workdir.read_regular`;
        which are images, and which of those may come back as such, `image_headers` (`images.py`) says."""
        import stat

        for path, info in entries:
            if info is None:
                self.omit("...", 0, "not looked at: the directory holds too many entries")
                break
            given = inputs.get(path)
            if given is not None and given[:3] == (info.st_ino, info.st_size, info.st_mtime_ns):
                if given[3] == -1:
                    continue  # in a session's directory before the call, and not changed since
                data = read(path, info, info.st_size)
                if data is not None and zlib.crc32(data) == given[3]:
                    continue  # handed in by the call and not changed (a coarse mtime alone could miss a rewrite)
            if len(self.files) >= MAX_FILES:
                self.omit(path, info.st_size, f"more than {MAX_FILES} files in one call")
            elif len(path) > MAX_NAME_CHARS:
                self.omit(path, info.st_size, f"a path longer than {MAX_NAME_CHARS:,} characters")
            elif stat.S_ISLNK(info.st_mode):
                self.omit(path, 0, "a symbolic link (never followed)")
            elif not stat.S_ISREG(info.st_mode):
                self.omit(path, 0, "not a regular file")
            else:
                self._add_file(path, info, read, image_headers)

    def _add_file(
        self,
        path: str,
        info: os.stat_result,
        read: Callable[[str, os.stat_result, int], bytes | None],
        image_headers: ModuleType,
    ) -> None:
        size = info.st_size
        data: bytes | None = None
        reason: str | None
        if size > self.bytes_left:
            reason = f"over what is left of the call's {self.budgets.call_bytes:,}-byte budget"
        else:
            data = read(path, info, self.bytes_left)
            if data is None:
                self.omit(path, size, "it changed or went away while it was read")
                return
            reason, linkable = self._over(data, image_headers)
            if not linkable:
                self.omit(path, len(data), str(reason))
                return
            if reason is None:
                is_image = image_headers.image_type(data) is not None
                self.files.append({"path": path, "bytes": len(data), "image": is_image})
                self.blobs.append(data)
                self.bytes_left -= len(data)
                if not is_image:
                    self.file_bytes_left -= len(data)
                return
        # Over a budget: linked whole where the kept budget has room, else listed as not returned.
        assert reason is not None
        if size <= self.kept_bytes_left and len(self.linked) < MAX_LINKED:
            if data is None:
                try:
                    data = read(path, info, self.kept_bytes_left)
                except MemoryError:  # a run at its memory limit: this file is listed, the rest goes on
                    self.omit(path, size, f"{reason}; too large to read to link it at the run's memory limit")
                    return
                if data is None:
                    self.omit(path, size, "it changed or went away while it was read")
                    return
                over, linkable = self._over(data, image_headers)
                if not linkable:  # an image too large to decode, never read before: never linked
                    self.omit(path, len(data), str(over))
                    return
            if self.link(path, data, reason):
                return
        size = size if data is None else len(data)
        self.omit(path, size, self.not_linked(reason, size))

    def _over(self, data: bytes, image_headers: ModuleType) -> tuple[str | None, bool]:
        """Which budget a file the call's budget has room for is over, if any, and whether it may be
        linked instead: not an image too large to decode (a client would decode a link to it too).
        An image by its bytes, as the server will judge it (`runner.execution.report`), not by its name."""
        mime = image_headers.image_type(data)
        is_image = mime is not None
        refused = image_headers.refused(*image_headers.image_size(data, mime)) if is_image else None
        shown = len(self.images) + sum(f["image"] for f in self.files)
        if refused is not None:
            return str(refused), False
        if is_image and shown >= self.budgets.images:
            return f"more than {self.budgets.images} image{'s' if self.budgets.images != 1 else ''} in one call", True
        if is_image and len(data) > self.budgets.image_bytes:
            return f"over the {self.budgets.image_bytes:,}-byte image budget", True
        if not is_image and len(data) > self.file_bytes_left:
            return f"over what is left of the call's {self.budgets.file_bytes:,}-byte budget for files", True
        return None, True

    def empty(self) -> bool:
        return self.result is None and not (self.table or self.images or self.files or self.omitted or self.linked)

    def encode(self, end: dict[str, Any] | None = None) -> bytes:
        """``report <header bytes> <blob bytes>``, a newline, the JSON header, the blobs in order: the
        table's first, where there is one.

        `end` is the run's own account of its end (`ended`), when it has one.
        """
        if end is not None and self.empty() and not self.more_omitted:
            return wire.encode_end(end)  # most runs return nothing but their end
        table = [self.table] if self.table is not None else []
        return wire.encode_report(end, self.header(), table + self.blobs + self.linked_blobs)

    def header(self) -> bytes:
        """The report's JSON header but its end (`wire.encode_header`), made once: by `gather`, in the
        call, before a session's call is sealed."""
        if self._header is not None:
            return self._header
        header = {
            "result": self.result,
            "result_chars": self.result_chars,
            "table": len(self.table) if self.table is not None else None,
            "images": self.images,
            "files": [{"path": f["path"], "bytes": f["bytes"]} for f in self.files],
            "omitted": self.omitted,
            "more_omitted": self.more_omitted,
            "linked": self.linked,
        }
        self._header = wire.encode_header(header)
        return self._header


def gather(
    budgets: wire.Budgets,
    value: object,
    figures: Any,
    inputs: dict[str, tuple[int, int, int, int]],
    walk: Callable[[], Iterator[tuple[str, os.stat_result | None]]],
    read: Callable[[str, os.stat_result, int], bytes | None],
    image_headers: ModuleType,
    tables: ModuleType,
) -> Report:
    """The run's report once its code has ended (`figures`: its `figures.Figures`).

    `walk` lists the run's directory (`workdir.walk`), `read` reads a file it listed, by its path
    relative to that directory (`workdir.read_regular`), `image_headers` is `images.py`, `tables`
    is `tables.py`.
    """
    report = Report(budgets)
    try:
        if value is not None and budgets.result_chars:
            report.result, report.result_chars = describe_value(value, budgets.result_chars)
        for rendered in figures.finish():
            report.add_figure(rendered.name, rendered.png, rendered.note, rendered.full)
        if budgets.call_bytes:
            report.add_files(walk(), inputs, read, image_headers)
    except Exception as exc:  # a MemoryError of a run that used up its memory, or what the code broke
        # A note, not a line on stderr: the run's own last line there is what its status is read from
        # where it tells no end of its own.
        report.omit("(the rest of what the run returns)", 0, f"could not be gathered: {_exception_text(exc)}")
    if value is not None and budgets.table_rows:
        # Last, with what the figures and files left (the model sees those; the table is the view's), and
        # on its own: a value the table cannot be made of loses the table only.
        try:
            report.add_table(tables.table_of(value, budgets.table_rows, min(budgets.table_bytes, report.bytes_left)))
        except Exception as exc:
            report.omit("(the last value's table)", 0, f"could not be made: {_exception_text(exc)}")
    if not report.empty() or report.more_omitted:
        report.header()  # now, in the call: a session's call is sealed before it sends its report
    return report


def ended(status: int, tmpfs: tuple[str, ...] = (), spawned: bool = False, limit: str = "") -> dict[str, Any]:
    """The run's end as the run knows it, once its output is flushed: its exit status, the CPU and
    peak memory of itself and every child it reaped (what wait4 would tell the server), and the limit
    its code's exception met, if any (`limit_met`).

    A `spawned` interpreter reads its own peak from its address space (VmHWM): the kernel's count for
    the process carries the high-water mark of the server it was spawned from (posix_spawn is vfork).
    `tmpfs`: the run's own tmpfs mounts (a sandboxed run's: its directory, /dev/shm, /run), whose pages
    are memory no rlimit counts. The kernel tells how much they hold now, so the peak is at least that
    with what the run's process holds now (its own memory, not its mapped files).
    """
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    held_kb = sum(_tmpfs_kb(path) for path in tmpfs)
    memory = _own_memory_kb() if spawned or held_kb else {}
    peak_kb = max(memory.get(b"VmHWM", 0) if spawned else own.ru_maxrss, children.ru_maxrss)
    if held_kb:
        peak_kb = max(peak_kb, held_kb + memory.get(b"RssAnon", 0))
    return {"status": status, "cpu": cpu, "maxrss_kb": peak_kb, "limit": limit}


def _tmpfs_kb(path: str) -> int:
    try:
        usage = os.statvfs(path)
    except OSError:
        return 0
    return (usage.f_blocks - usage.f_bfree) * usage.f_frsize // 1024


def _own_memory_kb() -> dict[bytes, int]:
    """VmHWM and RssAnon of this process, in kB (none where /proc cannot tell)."""
    try:
        with open("/proc/self/status", "rb") as status:
            lines = [line.split() for line in status if line.startswith((b"VmHWM:", b"RssAnon:"))]
    except OSError:
        return {}
    return {fields[0][:-1]: int(fields[1]) for fields in lines if len(fields) > 1}


def close_output() -> None:
    """Close stdout and stderr: once no process of the run holds them, the server has all the output."""
    os.closerange(1, 3)


def send(fd: int, data: bytes, shared: bool = False) -> None:
    """Write the report whole; a server that stopped listening (the call is over) gets nothing. Where
    the run may call tools (`shared`: its processes write frames on the socket too), holding the
    socket's lock alone, so that no frame goes into the report (`wire.ToolChannel.exchange`)."""
    try:
        if shared:
            wire.in_turn(fd, True, wire.write_whole, fd, data)  # a thread of the run's may be writing a frame
        else:
            wire.write_whole(fd, data)
    except OSError:
        pass


def limit_met(exc: BaseException, filename: str) -> str:
    """The limit an uncaught exception says the run met: "memory" for a MemoryError (numpy's and
    pandas' `_ArrayMemoryError` are subclasses) or an OSError ENOMEM, "file_size" for an OSError EFBIG;
    "" for anything else, and for one the run's own code raised with a ``raise`` statement naming it
    (a user's ``raise MemoryError`` is an error like any other; its code compiled as `filename`, or a
    session's call's under the same stem). Never raises: it runs when memory may be short."""
    try:
        import errno  # only here: every run pays for the imports at the top of this module
        import opcode

        if isinstance(exc, MemoryError):
            limit = "memory"
        elif isinstance(exc, OSError) and exc.errno in (errno.ENOMEM, errno.EFBIG):
            limit = "memory" if exc.errno == errno.ENOMEM else "file_size"
        else:
            return ""
        last = exc.__traceback__
        while last is not None and last.tb_next is not None:
            last = last.tb_next
        if last is None:
            return limit  # raised where no frame is (compiling the code)
        code = last.tb_frame.f_code
        # A frame of the run's own code ("<run_python>", a session's "<run_python call N>") stopped at
        # `raise X`: its own. A bare `raise` (argument count 0) passes on what something else raised.
        raised = code.co_code[last.tb_lasti] == opcode.opmap["RAISE_VARARGS"]
        explicit = raised and code.co_code[last.tb_lasti + 1] > 0
        return "" if explicit and code.co_filename.startswith(filename[:-1]) else limit
    except Exception:
        return "memory" if isinstance(exc, MemoryError) else ""
