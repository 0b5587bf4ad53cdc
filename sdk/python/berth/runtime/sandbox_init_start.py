"""How the sandbox process server (sandbox_init.py) starts a process: spawned, or forked.

Loaded by sandbox_init.py by its path, like sandbox_init_wire.py: stdlib only, Python 3.6+ syntax.
"""

import json
import os
import signal
import sys

# Signals the child gets back at their defaults: Python ignores SIGPIPE and
# SIGXFSZ (exec keeps ignored signals ignored), and handles the others here.
CHILD_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)
# posix_spawn (vfork and exec in glibc) copies none of this interpreter's
# memory and runs no Python in the child, where a fork pays for both before the
# child's exec (about a millisecond on a 2-core VM); it has no chdir or setuid,
# so a request with a cwd or a user is forked. setsid= is Python 3.8's.
CAN_SPAWN = hasattr(os, "posix_spawn") and sys.version_info >= (3, 8)


def fork_child(req, base_env, stdin_r, out_w, err_w, report_w):
    """In the forked child: never returns."""
    stage = "setup"
    try:
        for s in CHILD_DEFAULT_SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        os.setsid()
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        if req["user"] is not None:
            stage = "user"
            uid, gid = req["user"]
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        if req["cwd"] is not None:
            stage = "cwd"
            os.chdir(req["cwd"])
        env = dict(base_env)
        env.update(req["env"])
        stage = "exec"
        os.execvpe(req["args"][0], req["args"], env)
    except BaseException as e:  # noqa: B036 - the child must report and exit, whatever happened
        err = getattr(e, "errno", None) or 0
        msg = getattr(e, "strerror", None) or str(e)
        try:
            os.write(report_w, json.dumps({"stage": stage, "errno": err, "message": msg}).encode())
        finally:
            os._exit(127)


def spawn(req, base_env, stdin_r, out_w, err_w):
    """posix_spawn of the request (no cwd, no user) as fork_child would exec it; its pid, or OSError.

    The program is looked up on the PATH of the process's own environment, as
    os.execvpe does (posix_spawnp would use this server's): each directory in
    turn, the first error other than "not there" reported when none runs.
    """
    env = dict(base_env)
    env.update(req["env"])
    args = req["args"]
    name = args[0]
    kw = {
        "file_actions": [
            (os.POSIX_SPAWN_DUP2, stdin_r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ],
        "setsid": True,
        "setsigdef": CHILD_DEFAULT_SIGNALS,
    }
    if os.path.dirname(name):
        return os.posix_spawn(name, args, env, **kw)
    saved = last = None
    for d in os.get_exec_path(env):
        path = os.path.join(d, name)
        try:
            os.stat(path)
        except (FileNotFoundError, NotADirectoryError) as e:
            last = e  # nothing there: the exec would fail the same way
            continue
        except OSError:
            pass  # let the spawn say what is wrong with it
        try:
            return os.posix_spawn(path, args, env, **kw)
        except (FileNotFoundError, NotADirectoryError) as e:
            last = e
        except OSError as e:
            last = e
            if saved is None:
                saved = e
    raise saved or last or FileNotFoundError(2, os.strerror(2), name)
