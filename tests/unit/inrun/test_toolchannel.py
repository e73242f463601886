"""The run's side of its tool calls on its own: a `ToolChannel` over a socket pair, the test playing the
server, with threads for the run's callers and no processes."""

from __future__ import annotations

import gc
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from runner.inrun import wire
from runner.inrun.toolchannel import ToolChannel
from runner.inrun.wire import frame_answer, frame_line


def read_call(server_end: socket.socket, buffered: bytearray) -> tuple[bytes, bytes]:
    """The next tool call frame the run wrote: (call id, body)."""
    while (line := frame_line(buffered, b"tool")) is None:
        buffered += server_end.recv(4096)
    line_bytes, size, call_id = line
    while len(buffered) < line_bytes + size:
        buffered += server_end.recv(4096)
    body = bytes(buffered[line_bytes : line_bytes + size])
    del buffered[: line_bytes + size]
    return call_id, body


def calling(channel: ToolChannel, calls: dict[bytes, bytes]) -> tuple[dict[bytes, object], list[threading.Thread]]:
    """Each of `calls` (id: body) made by a thread of its own; what each got, by id, once joined."""
    got: dict[bytes, object] = {}

    def call(call_id: bytes, body: bytes) -> None:
        try:
            got[call_id] = channel.exchange(body, call_id)
        except Exception as exc:  # what the caller would see is the point
            got[call_id] = exc

    threads = [threading.Thread(target=call, args=item, daemon=True) for item in calls.items()]
    for thread in threads:
        thread.start()
    return got, threads


def main_thread() -> int:
    """The main thread's ident (where a signal's handler runs), for pthread_kill."""
    ident = threading.main_thread().ident
    assert ident is not None
    return ident


@pytest.fixture
def ends() -> Iterator[tuple[socket.socket, socket.socket]]:
    run_end, server_end = socket.socketpair()
    with run_end, server_end:
        server_end.settimeout(10)
        yield run_end, server_end


@pytest.fixture
def alarm_raises() -> Iterator[None]:
    def alarm(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("gave up")

    before = signal.signal(signal.SIGALRM, alarm)
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, before)


def _wait_until(condition: object, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.005)


RAISING = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)


@pytest.fixture
def four_signals_raise() -> Iterator[None]:
    # The collector stays off while these signals raise: a collection runs the process's gc callbacks
    # (Hypothesis installs one in the suite), and a signal that lands in one is raised there, as an
    # exception pytest reports as unraisable, not in the channel's steps these tests are about.
    before = {signum: signal.signal(signum, signal.default_int_handler) for signum in RAISING}
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_processs_threads_have_calls_in_flight_at_once_and_each_takes_its_own_answer(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # Before: a thread that found another thread's answer at the head took it for no one's (its process's
    # "one call in flight" was its own) and dropped it: that thread waited for ever.
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    pid = os.getpid()
    calls = {b"%d.%d" % (pid, n): b'{"n": %d}' % n for n in range(1, 5)}
    got, threads = calling(channel, calls)
    buffered = bytearray()
    sent = dict(read_call(server_end, buffered) for _ in calls)  # all four are in flight at once
    assert sent == calls
    for call_id in reversed(list(calls)):  # answered last first
        server_end.sendall(frame_answer(b"answer to " + calls[call_id], call_id))
    for thread in threads:
        thread.join(10)
    assert got == {call_id: b"answer to " + body for call_id, body in calls.items()}


def test_an_answer_too_large_for_one_thread_fails_its_call_alone(
    ends: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_end, server_end = ends
    monkeypatch.setattr(wire, "MAX_ANSWER_BYTES", 1000)
    channel = ToolChannel(run_end.fileno())
    pid = os.getpid()
    small, large = b"%d.1" % pid, b"%d.2" % pid
    got, threads = calling(channel, {small: b"{}", large: b"{}"})
    buffered = bytearray()
    assert {read_call(server_end, buffered)[0] for _ in range(2)} == {small, large}
    server_end.sendall(frame_answer(b"x" * 5000, large) + frame_answer(b"fits", small))
    for thread in threads:
        thread.join(10)
    assert got[small] == b"fits"
    assert isinstance(got[large], ValueError)
    assert str(got[large]) == "an answer too large"


@pytest.mark.usefixtures("alarm_raises")
def test_a_call_its_thread_gave_up_has_its_answer_dropped_and_the_other_threads_get_theirs(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # A signal's exception ends the main thread's wait: its answer comes after, and is no one's.
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    pid = os.getpid()
    kept, given_up = b"%d.1" % pid, b"%d.2" % pid
    got, threads = calling(channel, {kept: b"{}"})
    buffered = bytearray()
    assert read_call(server_end, buffered)[0] == kept
    gave_up = threading.Event()

    def server() -> None:
        assert read_call(server_end, buffered)[0] == given_up
        if gave_up.wait(10):
            server_end.sendall(frame_answer(b"too late", given_up) + frame_answer(b"yours", kept))

    answering = threading.Thread(target=server, daemon=True)
    answering.start()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(TimeoutError):
            channel.exchange(b"{}", given_up)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    gave_up.set()
    for thread in [*threads, answering]:
        thread.join(10)
    assert got == {kept: b"yours"}
    # The answer given up was dropped, not left at the head: the next call's answer is taken.
    later = b"%d.3" % pid
    answered = threading.Thread(
        target=lambda: server_end.sendall(frame_answer(b"next", read_call(server_end, buffered)[0])), daemon=True
    )
    answered.start()
    assert channel.exchange(b"{}", later) == b"next"
    answered.join(10)


# A run forks with threads as it likes (the child has the forking thread alone); Python 3.12 warns of it.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_childs_calls_are_its_own_while_its_parents_thread_waits(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # The parent's thread is reading the socket when the fork comes: the child, which has no such
    # thread, reads for itself (a fork copies the parent's state of who reads).
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    parents = b"%d.1" % os.getpid()
    got, threads = calling(channel, {parents: b"{}"})
    buffered = bytearray()
    assert read_call(server_end, buffered)[0] == parents
    pid = os.fork()
    if pid == 0:
        try:
            answer = channel.exchange(b"{}", b"%d.1" % os.getpid())
            os._exit(0 if answer == b"child's" else 1)
        finally:
            os._exit(2)
    try:
        child_call, _ = read_call(server_end, buffered)
        assert child_call == b"%d.1" % pid
        server_end.sendall(frame_answer(b"child's", child_call))
        deadline = time.monotonic() + 10
        while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        if ended[0] == 0:
            os.kill(pid, signal.SIGKILL)
            ended = os.waitpid(pid, 0)
    server_end.sendall(frame_answer(b"parent's", parents))
    for thread in threads:
        thread.join(10)
    assert os.waitstatus_to_exitcode(ended[1]) == 0
    assert got == {parents: b"parent's"}


def test_a_tool_channel_the_runs_code_made_non_blocking_takes_an_answer_that_comes_in_parts() -> None:
    # The run's side of its channel is made once; another process of the run can make fd 3 non-blocking
    # while a call waits. The answer's second part is sent only once the run's side, having taken the
    # first, found nothing more and made the fd blocking again (before: BlockingIOError, a failed call).
    run_end, server_end = socket.socketpair()
    fd = run_end.fileno()
    sent_rest: list[bool] = []

    def server() -> None:
        request = b""
        while b"\n" not in request:
            request += server_end.recv(100)
        line = frame_line(request, b"tool")
        assert line is not None
        line_bytes, size, call_id = line
        while len(request) < line_bytes + size:
            request += server_end.recv(100)
        os.set_blocking(fd, False)  # the run's code, elsewhere
        answer = frame_answer(b"y" * 500_000, call_id)
        server_end.sendall(answer[:100_000])
        deadline = time.monotonic() + 5
        while not os.get_blocking(fd) and time.monotonic() < deadline:
            time.sleep(0.001)
        sent_rest.append(os.get_blocking(fd))
        server_end.sendall(answer[100_000:])

    with run_end, server_end:
        channel = ToolChannel(fd)
        thread = threading.Thread(target=server, daemon=True)
        thread.start()
        assert channel.exchange(b'{"op": "call"}', b"%d.1" % os.getpid()) == b"y" * 500_000
        thread.join(5)
    assert sent_rest == [True]


@pytest.mark.usefixtures("alarm_raises")
def test_a_signal_while_the_main_thread_reads_another_threads_answer_leaves_that_thread_its_answer(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # Found by a review: the main thread calls first, so it is the one that reads; a worker's answer
    # came in two parts, and the main thread gave up its own call (a signal's exception) between them,
    # having taken the first part: the rest stayed at the head, no frame, and the worker (and every
    # later call of every process of the run) waited for ever. Now a thread takes its own answer alone.
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    pid = os.getpid()
    mains, workers = b"%d.1" % pid, b"%d.2" % pid
    got: dict[bytes, object] = {}
    main = main_thread()

    def worker() -> None:
        try:
            got[workers] = channel.exchange(b"{}", workers)
        except Exception as exc:
            got[workers] = exc

    worker_thread = threading.Thread(target=worker, daemon=True)

    def server() -> None:
        buffered = bytearray()
        assert read_call(server_end, buffered)[0] == mains
        _wait_until(lambda: channel._waiting.reader is not None)
        worker_thread.start()
        assert read_call(server_end, buffered)[0] == workers
        time.sleep(0.1)  # the worker waits on the main thread, which reads
        answer = frame_answer(b"y" * 500_000, workers)
        server_end.sendall(answer[:100_000])
        time.sleep(0.2)  # the main thread is taking it
        signal.pthread_kill(main, signal.SIGALRM)
        time.sleep(0.2)
        try:  # noqa: SIM105
            server_end.sendall(answer[100_000:])  # on c4f80cd no one takes it: blocks until the test ends
        except OSError:
            pass

    serving = threading.Thread(target=server, daemon=True)
    serving.start()
    with pytest.raises(TimeoutError):
        channel.exchange(b"{}", mains)
    serving.join(5)
    worker_thread.join(5)
    assert not worker_thread.is_alive(), "the worker waits for an answer that will never come whole"
    assert got == {workers: b"y" * 500_000}


@pytest.mark.usefixtures("alarm_raises")
def test_a_signal_in_the_main_thread_after_it_handed_the_reading_over_fails_its_own_call_alone(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # Found by a review: the reading thread took the others' answers for them, and a signal's exception
    # between its receive and the hand-over lost a worker's answer. Now the worker's answer at the head
    # makes the worker the reader; the main thread's exception, later, ends its own call only.
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    pid = os.getpid()
    mains, workers, later = b"%d.1" % pid, b"%d.2" % pid, b"%d.3" % pid
    got: dict[bytes, object] = {}
    main = main_thread()
    worker_thread = threading.Thread(target=lambda: got.update({workers: channel.exchange(b"{}", workers)}))

    def server() -> None:
        buffered = bytearray()
        assert read_call(server_end, buffered)[0] == mains
        _wait_until(lambda: channel._waiting.reader == mains)
        worker_thread.start()
        assert read_call(server_end, buffered)[0] == workers
        server_end.sendall(frame_answer(b"for the worker", workers))
        worker_thread.join(5)
        signal.pthread_kill(main, signal.SIGALRM)  # the main thread waits again, the reader once more
        _wait_until(lambda: mains not in channel._waiting.calls)
        server_end.sendall(frame_answer(b"too late", mains))
        assert read_call(server_end, buffered)[0] == later
        server_end.sendall(frame_answer(b"later", later))

    serving = threading.Thread(target=server, daemon=True)
    serving.start()
    with pytest.raises(TimeoutError):
        channel.exchange(b"{}", mains)
    assert channel.exchange(b"{}", later) == b"later", "the answer given up was dropped"
    serving.join(5)
    assert got == {workers: b"for the worker"}
    assert (channel._waiting.reader, channel._waiting.calls) == (None, {})


def test_a_call_its_own_thread_read_is_not_left_among_those_waited_for(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # Found by a review: the reading thread returned its own answer without striking its call off the
    # calls waited for: one id left per call, in every run of one thread, for its life.
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    buffered = bytearray()
    for n in range(1, 51):
        call_id = b"%d.%d" % (os.getpid(), n)
        answering = threading.Thread(
            target=lambda: server_end.sendall(frame_answer(b"ok", read_call(server_end, buffered)[0])), daemon=True
        )
        answering.start()
        assert channel.exchange(b"{}", call_id) == b"ok"
        answering.join(5)
    assert channel._waiting.calls == {}


@pytest.mark.usefixtures("alarm_raises")
def test_a_signal_while_the_main_thread_takes_its_own_answer_comes_once_the_answer_is_whole(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # Its exception ends that call; the frame was taken whole, so the next call reads its own answer
    # (a frame left half-read at the head would hold up every later call of the run).
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    pid = os.getpid()
    first, second = b"%d.1" % pid, b"%d.2" % pid
    main = main_thread()

    def server() -> None:
        buffered = bytearray()
        assert read_call(server_end, buffered)[0] == first
        answer = frame_answer(b"y" * 500_000, first)
        server_end.sendall(answer[:100_000])
        time.sleep(0.2)  # the main thread is taking it
        signal.pthread_kill(main, signal.SIGALRM)
        time.sleep(0.2)
        server_end.sendall(answer[100_000:])
        assert read_call(server_end, buffered)[0] == second
        server_end.sendall(frame_answer(b"second", second))

    serving = threading.Thread(target=server, daemon=True)
    serving.start()
    with pytest.raises(TimeoutError):
        channel.exchange(b"{}", first)
    assert channel.exchange(b"{}", second) == b"second"
    serving.join(5)


def test_a_reader_whose_call_ended_without_letting_go_of_the_reading_is_taken_over(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # A signal handler's exception at just the wrong step can leave the reading with a call that has
    # ended (or lose a wake): the waiting calls look again now and then, and one reads.
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    channel._waiting.reader = b"%d.99" % os.getpid()  # no such call waits
    call_id = b"%d.1" % os.getpid()
    got, threads = calling(channel, {call_id: b"{}"})
    buffered = bytearray()
    assert read_call(server_end, buffered)[0] == call_id
    server_end.sendall(frame_answer(b"taken over", call_id))
    for thread in threads:
        thread.join(5)
    assert got == {call_id: b"taken over"}


@pytest.mark.usefixtures("four_signals_raise")
def test_signals_held_while_the_main_thread_drops_a_frame_come_together_and_its_call_is_not_left_waited_for(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # Found by a second review: the main thread drops a frame no one takes with its signals held; four
    # signals that came meanwhile are raised one after the other, at the next four checks: the last at
    # _give_up's first step, which then never struck the call off those waited for. Its answer, when it
    # came, made that ended call the reader, and every other thread of the process waited for ever.
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    pid = os.getpid()
    mains, workers, nobodys = b"%d.1" % pid, b"%d.2" % pid, b"%d.77" % pid
    main = main_thread()
    buffered = bytearray()

    def server() -> None:
        assert read_call(server_end, buffered)[0] == mains
        orphan = frame_answer(b"x" * 100_000, nobodys)
        server_end.sendall(orphan[:10_000])  # the main thread drops it, its signals held
        time.sleep(0.2)
        for signum in RAISING:
            signal.pthread_kill(main, signum)
        time.sleep(0.2)
        server_end.sendall(orphan[10_000:])

    serving = threading.Thread(target=server, daemon=True)
    serving.start()
    with pytest.raises(KeyboardInterrupt):
        channel.exchange(b"{}", mains)
    serving.join(5)
    got, threads = calling(channel, {workers: b"{}"})
    assert read_call(server_end, buffered)[0] == workers
    server_end.sendall(frame_answer(b"late", mains) + frame_answer(b"for the worker", workers))
    for thread in threads:
        thread.join(3)
    assert got == {workers: b"for the worker"}, (channel._waiting.reader, channel._waiting.calls)


@pytest.mark.usefixtures("four_signals_raise")
def test_two_signals_while_the_main_thread_waits_fail_its_own_call_alone(
    ends: tuple[socket.socket, socket.socket],
) -> None:
    # Found by a second review: the main thread waits (a worker reads); two signals come at once: the
    # first raises in its wait, the second at _give_up's first step. Its answer then made it the reader,
    # for ever.
    run_end, server_end = ends
    channel = ToolChannel(run_end.fileno())
    pid = os.getpid()
    mains, workers = b"%d.1" % pid, b"%d.2" % pid
    main = main_thread()
    buffered = bytearray()
    got, threads = calling(channel, {workers: b"{}"})
    assert read_call(server_end, buffered)[0] == workers
    _wait_until(lambda: channel._waiting.reader == workers)

    def server() -> None:
        assert read_call(server_end, buffered)[0] == mains
        time.sleep(0.1)
        signal.pthread_kill(main, signal.SIGUSR1)
        signal.pthread_kill(main, signal.SIGUSR2)

    serving = threading.Thread(target=server, daemon=True)
    serving.start()
    with pytest.raises(KeyboardInterrupt):
        channel.exchange(b"{}", mains)
    serving.join(5)
    server_end.sendall(frame_answer(b"late", mains) + frame_answer(b"for the worker", workers))
    for thread in threads:
        thread.join(3)
    assert got == {workers: b"for the worker"}, (channel._waiting.reader, channel._waiting.calls)
