"""Freed memory handed back to the OS (agents/memory.py, issue 55): glibc keeps what a process
freed, so a process that once peaked (an XLA compile, SMAX's start) holds that peak all run."""

import subprocess
import sys

import pytest

# A child process: 400 MB of 2 KB blocks (malloc's heap, under its mmap threshold), all but one
# in 64 freed, so the free pages sit between live blocks where malloc does not return them.
CHILD = """
import sys
from agents.memory import release_freed_memory
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) // 1024
blocks = [bytes(2048) for _ in range(200_000)]
kept = blocks[::64]
del blocks
before = rss()
released = release_freed_memory()
print(before, rss(), released)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim (Linux)")
def test_freed_memory_goes_back_to_the_os():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    before, after, released = out.split()
    before, after = int(before), int(after)
    assert released == "True"
    assert before > 300, out            # the freed blocks were still held by the process
    assert after < before - 250, out    # and went back to the OS


PERIODIC = """
import threading, time
from agents import memory
calls = []
memory.release_freed_memory = lambda: calls.append(1) or True
memory.release_periodically(every_seconds=0.01)
memory.release_periodically(every_seconds=0.01)   # a second node of the same process
deadline = time.time() + 5
while len(calls) < 3 and time.time() < deadline:
    time.sleep(0.01)
print(sum(t.name == "release-freed-memory" for t in threading.enumerate()), len(calls))
"""


def test_release_periodically_starts_one_thread_per_process():
    out = subprocess.run([sys.executable, "-c", PERIODIC], capture_output=True, text=True, check=True).stdout
    threads, calls = map(int, out.split())
    assert threads == 1, out
    assert calls >= 3, out   # once at once, then every `every_seconds`
