"""A fork child inherits copies of its parent's handles, not their roles: closing them in the
child, or leaving them to the interpreter's exit (the issue's `if os.fork() == 0: raise
SystemExit(0)`), leaves the parent owner, producer and heir (pyfork.py runs it in a process
of its own)."""
import os
import sys

import pytest

import shmbox
from conftest import TESTS_DIR

PYFORK = os.path.join(TESTS_DIR, "pyfork.py")


@pytest.mark.parametrize("mode", ["exit", "close"])
def test_a_fork_child_leaves_the_parent_its_roles(box_name, children, helper, mode):
    name, other = box_name("a"), box_name("b")
    shmbox.Box.create(name, capacity=8).close()
    shmbox.Box.create(other, capacity=8).close()
    owner = children([helper, "own", other])
    owner.expect("owned")
    script = children([sys.executable, PYFORK, name, other, mode])
    assert script.line(30) == "child 0", script.lines  # its copies refused to act
    # still the owner (stat shows it) and its receive works; still the producer
    assert script.line(30) == "owner True True after"
    # still the heir of the other box, and it takes over when that box's owner dies
    assert script.line(30) == "heir True True py-fork"
    owner.kill()
    script.send("go")
    assert script.line(30) == "took owner-died py-fork"
    code, _, err = script.wait(30)
    assert code == 0, err
