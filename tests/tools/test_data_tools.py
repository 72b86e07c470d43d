"""accord-make-jpegs, accord-pack and accord-data-bench from the command line, where they
meet the world: a write that fails, Fashion-MNIST files of another image size, an output
folder that already holds files, progress into a log, a re-pack that fails, files that
are no JPEG, empty path arguments.

  python3 test_data_tools.py <accord-make-jpegs> <accord-pack> <accord-data-bench>

A full disk is stood in for by a file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored so
that the write fails instead of the process dying): it needs no root and no mount.
"""
import glob
import gzip
import hashlib
import os
import re
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

MAKE_JPEGS = os.path.abspath(sys.argv[1])
PACK = os.path.abspath(sys.argv[2])
DATA_BENCH = os.path.abspath(sys.argv[3])


def run(cmd, fsize_limit=None, cwd=None, memory_limit=None):
    def limit():
        if fsize_limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))
        if memory_limit:  # so that a huge allocation fails at once, never swapping
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    # Bytes, decoded here: text mode would turn the '\r' looked for into '\n'.
    r = subprocess.run(cmd, capture_output=True, timeout=120, cwd=cwd,
                       preexec_fn=limit if fsize_limit or memory_limit else None)
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    return r


def signal_when(cmd, ready, sig):
    """Starts cmd, sends it sig once ready() is true, and returns its exit status (minus
    the signal's number where the signal ended it) and its stderr."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not ready() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    return p.returncode, err.decode()


def files_under(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, names in os.walk(folder) for f in names)


def digests(folder):
    def sha(f):
        with open(os.path.join(folder, f), "rb") as data:
            return hashlib.sha256(data.read()).hexdigest()
    return {f: sha(f) for f in files_under(folder)}


def write_idx(path, dims, data):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 8, len(dims)))
        f.write(struct.pack(">" + "I" * len(dims), *dims))
        f.write(data)


class InTempDir(unittest.TestCase):
    """A test with a folder of its own, self.dir, removed afterwards."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()


class MakeJpegs(InTempDir):
    def synthetic(self, out, train=20, val=4, **kw):
        return run([MAKE_JPEGS, out, "--source", "synthetic", "--train", str(train), "--val", str(val),
                    "--classes", "2", "--min-size", "64", "--max-size", "64"], **kw)

    def test_a_failed_write_is_an_error_naming_the_file(self):
        out = os.path.join(self.dir, "j")
        # Each 64x64 image is several KiB: the first write already fails.
        r = self.synthetic(out, fsize_limit=1024)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"accord-make-jpegs: error: " + out +
                         r"/(train|val)/class-\d+/\d{6}\.jpg: write failed: File too large\n")
        self.assertNotIn("training and", r.stdout)
        self.assertFalse(os.path.exists(out))  # nothing half made left behind

    def fashion(self, test_dims, test_pixels, val, train_labels=(2, 1, 0)):
        """A Fashion-MNIST folder (a training image per label given) and
        accord-make-jpegs run on it."""
        fm = os.path.join(self.dir, "fm")
        os.makedirs(fm, exist_ok=True)
        n = test_dims[0]
        write_idx(os.path.join(fm, "t10k-images-idx3-ubyte.gz"), test_dims, test_pixels)
        write_idx(os.path.join(fm, "t10k-labels-idx1-ubyte.gz"), [n], bytes(i % 10 for i in range(n)))
        train = len(train_labels)
        write_idx(os.path.join(fm, "train-images-idx3-ubyte.gz"), [train, 28, 28], bytes(train * 784))
        write_idx(os.path.join(fm, "train-labels-idx1-ubyte.gz"), [train], bytes(train_labels))
        out = os.path.join(self.dir, "j")
        return fm, out, run([MAKE_JPEGS, out, "--fashion-dir", fm, "--train", str(train), "--val",
                             str(val), "--min-size", "16", "--max-size", "16"])

    def test_fashion_images_are_drawn_from_their_own_pixels(self):
        # Image j: black but for a white column at x = 9 * j (j < 3), so each output
        # image is bright where its own source image is, at a third of the width apart.
        images = b"".join(bytes((255 if x == 9 * j else 0) for y in range(28) for x in range(28))
                          for j in range(3))
        _, out, r = self.fashion([3, 28, 28], images, 3)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"accord-make-jpegs: 3 training and 3 validation images in {out}\n")
        self.assertEqual(files_under(os.path.join(out, "train")),
                         ["pullover/000000.jpg", "t-shirt/000002.jpg", "trouser/000001.jpg"])
        self.assertEqual(files_under(os.path.join(out, "val")),
                         ["pullover/000002.jpg", "t-shirt/000000.jpg", "trouser/000001.jpg"])
        try:
            from PIL import Image
        except ImportError:
            return
        for j, name in enumerate(["t-shirt/000000.jpg", "trouser/000001.jpg", "pullover/000002.jpg"]):
            img = Image.open(os.path.join(out, "val", name)).convert("L")
            column = [sum(img.getpixel((x, y)) for y in range(16)) for x in range(16)]
            self.assertEqual(column.index(max(column)) * 3 // 16, j, column)

    def test_fashion_images_of_another_size_are_refused_by_file(self):
        fm, out, r = self.fashion([4000, 14, 14], bytes(4000 * 196), 4000)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, f"accord-make-jpegs: error: {fm}/t10k-images-idx3-ubyte.gz: "
                                   "images of 14x14; Fashion-MNIST's are 28x28\n")
        self.assertFalse(os.path.exists(out))

    def test_a_folder_with_files_in_it_is_refused(self):
        out = os.path.join(self.dir, "j")
        self.assertEqual(self.synthetic(out).returncode, 0)
        before = digests(out)
        r = self.synthetic(out, 5, 2)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, f"accord-make-jpegs: error: {out}: folder is not empty; "
                                   "name a new or empty one (or remove it first)\n")
        self.assertEqual(digests(out), before)
        empty = os.path.join(self.dir, "empty")
        os.mkdir(empty)
        self.assertEqual(self.synthetic(empty).returncode, 0)
        self.assertEqual(len(files_under(empty)), 24)

    def test_a_signal_removes_what_the_run_wrote(self):
        """Ctrl-C part way leaves no partial folder to block a rerun: a new folder goes,
        an empty one is emptied again."""
        def some_images(folder):
            return lambda: len(files_under(folder)) >= 5

        empty = os.path.join(self.dir, "empty")
        os.mkdir(empty)
        for out, sig in ((os.path.join(self.dir, "new"), signal.SIGINT), (empty, signal.SIGTERM)):
            with self.subTest(out=out):
                rc, err = signal_when([MAKE_JPEGS, out, "--source", "synthetic", "--train", "100000",
                                       "--val", "0", "--min-size", "64", "--max-size", "64"],
                                      some_images(out), sig)
                self.assertEqual(rc, -sig, err)  # ended by the signal, not finished before it
                self.assertEqual(os.path.exists(out), out == empty)
                self.assertEqual(os.listdir(out) if out == empty else [], [])
                self.assertIn(f"accord-make-jpegs: {signal.strsignal(sig)}: removed the images "
                              "written\n", err)
                self.assertEqual(self.synthetic(out).returncode, 0)

    def test_counts_that_leave_a_class_out_are_refused(self):
        """The trainer evaluates only on a val/ with train/'s classes, and --classes is
        what the set should have: counts that cannot give it are refused, naming them."""
        out = os.path.join(self.dir, "j")
        for counts, message in (
                (["--train", "5", "--val", "0"], "--train 5 gives a training image to only 5 of the "
                 "--classes 1000: every class needs one (raise --train to 1000 or lower --classes)"),
                (["--train", "1000", "--val", "200"], "--val 200 gives a validation image to only "
                 "200 of the --classes 1000, and the trainer evaluates only on a val/ with train/'s "
                 "classes (raise --val to 1000, or pass --val 0)")):
            r = run([MAKE_JPEGS, out, "--source", "synthetic", "--classes", "1000"] + counts)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(r.stderr, f"accord-make-jpegs: error: {message}\n")
            self.assertFalse(os.path.exists(out))
        # Fashion-MNIST: which classes a split gets follows from the files' labels.
        _, out, r = self.fashion([3, 28, 28], bytes(3 * 784), 3, train_labels=(3, 4))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr, "accord-make-jpegs: error: --train 2 and --val 3 give train/ 2 "
                                   "classes and val/ 3 (t-shirt in val/ only, trouser in val/ only, "
                                   "pullover in val/ only and 2 more); the trainer evaluates only on "
                                   "a val/ with train/'s classes: raise --train and --val until each "
                                   "has every class, or pass --val 0\n")
        self.assertFalse(os.path.exists(out))

    def test_a_missing_fashion_folder_names_this_tools_flag(self):
        out = os.path.join(self.dir, "j")
        r = run([MAKE_JPEGS, out, "--fashion-dir", os.path.join(self.dir, "absent")])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr, f"accord-make-jpegs: error: {self.dir}/absent/train-images-idx3-"
                                   "ubyte.gz: no such file (install the Debian package "
                                   "dataset-fashion-mnist or pass --fashion-dir)\n")
        self.assertFalse(os.path.exists(out))

    def test_progress_into_a_log_is_whole_lines(self):
        r = self.synthetic(os.path.join(self.dir, "j"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("\r", r.stderr)
        self.assertTrue(r.stderr.endswith("accord-make-jpegs: 24 / 24 images (100%)\n"), r.stderr)


class Pack(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.src = os.path.join(self.dir, "j")
        r = run([MAKE_JPEGS, self.src, "--source", "synthetic", "--train", "12", "--val", "0",
                 "--min-size", "64", "--max-size", "96"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.train = os.path.join(self.src, "train")

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_failed_repack_leaves_the_pack_there(self):
        out = os.path.join(self.dir, "packed")
        r = run([PACK, self.train, out, "--shards", "2", "--quiet"])
        self.assertEqual(r.returncode, 0, r.stderr)
        before = digests(out)
        # Another seed, so that every shard would change; no shard fits the limit.
        r = run([PACK, self.train, out, "--shards", "2", "--seed", "5", "--quiet"], fsize_limit=4096)
        self.assertEqual(digests(out), before)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"^accord-pack: error: " + out +
                         r"/shard-00000\.rec\.tmp\.\d+: write failed: File too large\n$")

    def test_files_that_are_no_jpeg_are_refused_by_name(self):
        with open(os.path.join(self.train, "class-1", "png.jpg"), "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + bytes(64))
        out = os.path.join(self.dir, "packed")
        r = run([PACK, self.train, out, "--quiet"])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, f"accord-pack: error: {self.train}: 1 file is not a JPEG the "
                                   "trainer can decode (remove or convert them, or leave them out "
                                   "with --corrupt skip); nothing was packed:\n"
                                   "  class-1/png.jpg: Not a JPEG file: starts with 0x89 0x50\n")
        self.assertEqual(files_under(out), [])
        # --corrupt skip: left out, named, and the other 12 packed.
        r = run([PACK, self.train, out, "--quiet", "--corrupt", "skip"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "accord-pack: left out class-1/png.jpg: Not a JPEG file: starts "
                                   "with 0x89 0x50\n")
        self.assertRegex(r.stdout, r"^accord-pack: 12 images of \d+ classes, .*\n"
                                   r"accord-pack: 1 file\(s\) left out: no JPEG the trainer can decode\n$")
        with open(os.path.join(out, "index.tsv")) as f:
            self.assertNotIn("png.jpg", f.read())

    def test_a_seed_out_of_range_is_refused(self):
        for seed in ("-5", "18446744073709551616"):
            for cmd in ([PACK, self.train, os.path.join(self.dir, "p")],
                        [MAKE_JPEGS, os.path.join(self.dir, "m")]):
                r = run(cmd + ["--seed", seed, "--quiet"] if cmd[0] == PACK else cmd + ["--seed", seed])
                self.assertEqual(r.returncode, 105, r.stderr)  # CLI11's validation failure
                self.assertIn(f"--seed: {seed} is not an integer in [0, 2^64)", r.stderr)


    def test_an_output_inside_the_source_is_refused(self):
        out = os.path.join(self.train, "packed")
        r = run([PACK, self.train, out, "--quiet"])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr, f"accord-pack: error: the output folder {out} is inside the source "
                                   f"folder {self.train}: a later pack of {self.train} would take it "
                                   "for a class; name a folder outside it\n")
        self.assertFalse(os.path.exists(out))

    def test_a_class_without_images_is_kept_and_named(self):
        os.mkdir(os.path.join(self.train, "aardvark"))
        r = run([PACK, self.train, os.path.join(self.dir, "p"), "--quiet"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "accord-pack: class aardvark (label 0) has no images; kept as a "
                                   "class, as accord-resnet --dataset folder keeps it\n")
        self.assertIn("images of 11 classes", r.stdout)

    def test_a_shard_count_that_is_no_number_is_refused(self):
        for shards in ("abc", "-1", "1048577"):
            r = run([PACK, self.train, os.path.join(self.dir, "p"), "--shards", shards, "--quiet"])
            self.assertEqual(r.returncode, 105, r.stderr)
            self.assertIn(f"--shards: {shards} is not an integer in [0, 1048576]", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.dir, "p")))
        # The other tools' counts alike.
        for cmd, flag in (([MAKE_JPEGS, os.path.join(self.dir, "m"), "--train"], "--train"),
                          ([DATA_BENCH, "--data-dir", self.train, "--batch-size"], "--batch-size")):
            r = run(cmd + ["abc"])
            self.assertEqual(r.returncode, 105, r.stderr)
            self.assertIn(f"{flag}: abc is not an integer in [1, ", r.stderr)


class PackInterrupted(unittest.TestCase):
    """A pack that is interrupted leaves no temporary in its output folder; one killed
    where it cannot clean up has its temporaries removed by the next pack there."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # One large image, linked under many names: a pack long enough to be caught
        # writing (about 250 MB), made in a second.
        src = os.path.join(cls.tmp.name, "j")
        r = run([MAKE_JPEGS, src, "--source", "synthetic", "--train", "1", "--val", "0",
                 "--classes", "1", "--min-size", "3000", "--max-size", "3000", "--quality", "100"])
        assert r.returncode == 0, r.stderr
        cls.train = os.path.join(src, "train")
        first = os.path.join(cls.train, "class-0", "000000.jpg")
        for i in range(1, 32):
            os.link(first, os.path.join(cls.train, "class-0", f"{i:06d}.jpg"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.out = os.path.join(self.tmp.name, "packed")
        r = run([PACK, self.train, self.out, "--shards", "4", "--quiet"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.before = digests(self.out)

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.out], check=True)

    def temporaries(self):
        return glob.glob(os.path.join(self.out, "*.tmp.*"))

    def interrupt(self, sig):
        return signal_when([PACK, self.train, self.out, "--shards", "4", "--seed", "3", "--quiet"],
                           lambda: self.temporaries(), sig)

    def test_a_signal_removes_the_temporaries(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            rc, err = self.interrupt(sig)
            self.assertEqual(rc, -sig, err)  # ended by the signal, not finished before it
            self.assertEqual(self.temporaries(), [])
            self.assertEqual(digests(self.out), self.before)  # the pack there, untouched

    def test_temporaries_of_a_killed_pack_are_removed_by_the_next(self):
        rc, err = self.interrupt(signal.SIGKILL)
        self.assertEqual(rc, -signal.SIGKILL, err)
        left = self.temporaries()
        self.assertNotEqual(left, [])
        r = run([PACK, self.train, self.out, "--shards", "2", "--quiet"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stderr.splitlines()),
                         sorted(f"accord-pack: removed {path}, left by a pack that was killed"
                                for path in left))
        self.assertEqual(sorted(os.listdir(self.out)), ["index.tsv", "shard-00000.rec", "shard-00001.rec"])


class DataBench(InTempDir):
    def images(self, n, size):
        out = os.path.join(self.dir, f"j{n}")
        r = run([MAKE_JPEGS, out, "--source", "synthetic", "--train", str(n), "--val", "0",
                 "--min-size", str(size), "--max-size", str(size)])
        self.assertEqual(r.returncode, 0, r.stderr)
        return os.path.join(out, "train")

    def test_an_epoch_within_the_prefetch_is_timed_whole(self):
        # One batch an epoch, 4 prefetched: the untimed first pass used to decode the
        # timed one's batch too, which then took microseconds (tens of millions of
        # images/s). 400-pixel images take two workers milliseconds each.
        train = self.images(20, 400)
        r = run([DATA_BENCH, "--data-dir", train, "--batch-size", "64", "--image-size", "64",
                 "--prefetch", "4", "--data-workers", "2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        rate = float(re.fullmatch(r"accord-data-bench: folder 20 images in [0-9.]+ s: ([0-9.]+) "
                                  r"images/s \(2 workers\)\n", r.stdout).group(1))
        self.assertLess(rate, 100000)
        self.assertEqual(r.stderr, f"accord-data-bench: --batch-size 64 is more than the 20 images "
                                   f"in {train}: batches of 20\n")

    def test_a_loader_larger_than_memory_is_refused(self):
        # 65 batches of 1000 images of 3 x 2048 x 2048 floats: 3.0 TiB.
        train = self.images(1000, 8)
        r = run([DATA_BENCH, "--data-dir", train, "--batch-size", "1000", "--image-size", "2048",
                 "--prefetch", "64"], memory_limit=8 << 30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"^accord-data-bench: error: the data loader needs 3046\.9 GiB "
                                   r"\(65 batches of 1000 images of 3x2048x2048 floats\), more than "
                                   r"this machine's [0-9.]+ GiB; lower --prefetch, --batch-size or "
                                   r"--image-size\n$")


class EmptyPaths(unittest.TestCase):
    """An empty path argument ("$OUT" with OUT unset) is refused before anything is
    written: to the file system calls it is the current folder."""

    def test_an_empty_output_leaves_the_current_folder_alone(self):
        with tempfile.TemporaryDirectory() as cwd:
            for split in ("train", "val"):
                os.makedirs(os.path.join(cwd, split, "mine"))
                with open(os.path.join(cwd, split, "mine", "keep.jpg"), "wb") as f:
                    f.write(b"user data")
            before = digests(cwd)
            for limit in (None, 1024):  # one run that would succeed, one that would fail
                r = run([MAKE_JPEGS, "", "--source", "synthetic", "--train", "10", "--val", "10",
                         "--min-size", "64", "--max-size", "64"], fsize_limit=limit, cwd=cwd)
                self.assertEqual(r.returncode, 105, r.stderr)
                self.assertIn("output: the path is empty (an unset variable?)", r.stderr)
                self.assertEqual(digests(cwd), before)

    def test_every_path_argument_is_checked(self):
        with tempfile.TemporaryDirectory() as cwd:
            for cmd, name in (([MAKE_JPEGS, "out", "--fashion-dir", ""], "--fashion-dir"),
                              ([PACK, "", "out"], "source"),
                              ([PACK, "src", ""], "output"),
                              ([DATA_BENCH, "--data-dir", ""], "--data-dir")):
                with self.subTest(cmd=cmd):
                    r = run(cmd, cwd=cwd)
                    self.assertEqual(r.returncode, 105, r.stderr)
                    self.assertIn(f"{name}: the path is empty (an unset variable?): name a file or "
                                  "folder", r.stderr)
                    self.assertEqual(os.listdir(cwd), [])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
