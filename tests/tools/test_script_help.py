"""Every shell script of ci/ and tools/ answers --help (and -h) with its usage, at once,
and does nothing else: no install, build, test run or device preparation starts.

  python3 test_script_help.py <source dir>
"""
import glob
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.abspath(sys.argv[1])
SCRIPTS = sorted(glob.glob(os.path.join(SOURCE, "ci", "*.sh")) +
                 glob.glob(os.path.join(SOURCE, "tools", "*.sh")))


class ScriptHelp(unittest.TestCase):
    def test_the_scripts_are_found(self):
        self.assertGreaterEqual(len(SCRIPTS), 15)

    def test_every_script_prints_its_usage_and_starts_nothing(self):
        for script in SCRIPTS:
            for flag in ("--help", "-h"):
                with self.subTest(script=os.path.relpath(script, SOURCE), flag=flag), \
                        tempfile.TemporaryDirectory() as cwd:
                    # From an empty folder with only the system's PATH: a script that
                    # went to work instead would fail, write, or take long.
                    p = subprocess.run(["bash", script, flag], cwd=cwd, capture_output=True,
                                       text=True, timeout=10, stdin=subprocess.DEVNULL,
                                       env={"PATH": "/usr/bin:/bin", "HOME": cwd})
                    self.assertEqual(p.returncode, 0, p.stderr)
                    self.assertTrue(p.stdout.strip(), "no usage printed")
                    self.assertEqual(os.listdir(cwd), [], "it wrote files")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
