"""A task that ignores SIGTERM and starts a grandchild: the launcher must still leave nothing.

Prints "PID <pid>" for itself and its grandchild, then sleeps. With
--exit_code=N it instead exits with N when its --task_index equals --fail_task.
"""

import signal
import subprocess
import sys
import time

arguments = dict(arg.lstrip("-").split("=", 1) for arg in sys.argv[1:] if "=" in arg)
if "exit_code" in arguments:
    time.sleep(float(arguments.get("delay", "0")))
    if arguments.get("task_index") == arguments.get("fail_task", "0"):
        sys.exit(int(arguments["exit_code"]))
    time.sleep(600)
    sys.exit(0)

signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"PID {grandchild.pid}", flush=True)
print(f"PID {__import__('os').getpid()}", flush=True)
time.sleep(600)
