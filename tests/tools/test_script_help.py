"""Every shell script of ci/ and tools/ answers --help (and -h) with its usage, at once,
and does nothing else: no install, build, test run or device preparation starts.

  python3 test_script_help.py <source dir>
"""
import glob
import os
import subprocess
import sys
import tempfile

SOURCE = os.path.abspath(sys.argv[1])
scripts = sorted(glob.glob(os.path.join(SOURCE, "ci", "*.sh")) +
                 glob.glob(os.path.join(SOURCE, "tools", "*.sh")))
failed = []
for script in scripts:
    name = os.path.relpath(script, SOURCE)
    for flag in ("--help", "-h"):
        # From an empty folder with no PATH but the system's: a script that went to work
        # instead would fail or take long, not print its usage in a moment.
        with tempfile.TemporaryDirectory() as cwd:
            try:
                p = subprocess.run(["bash", script, flag], cwd=cwd, capture_output=True, text=True,
                                   timeout=10, stdin=subprocess.DEVNULL,
                                   env={"PATH": "/usr/bin:/bin", "HOME": cwd})
                ok = p.returncode == 0 and p.stdout.strip() and not os.listdir(cwd)
                why = f"exit {p.returncode}, {len(p.stdout.splitlines())} lines, wrote {os.listdir(cwd)}"
            except subprocess.TimeoutExpired:
                ok, why = False, "still running after 10 s"
        print(f"{'ok' if ok else 'FAILED'}: {name} {flag} ({why})", flush=True)
        if not ok:
            failed.append(f"{name} {flag}")
check = len(scripts) >= 15
print(f"{'ok' if check else 'FAILED'}: {len(scripts)} scripts found", flush=True)
if failed or not check:
    print(f"FAILED: {failed}")
    sys.exit(1)
print("OK")
