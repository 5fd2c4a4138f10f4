"""The solver (docs/protocol.md section 5): hex(sha256(salt + nonce)) starts with
`difficulty` '0' characters; limits checked before and during the work."""

import hashlib
import inspect
import multiprocessing
import os
import sys
import threading
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from pow_shield import _solver  # noqa: E402

# (salt, difficulty, smallest nonce, sha256 hex of salt+nonce), checked with
# coreutils: printf '%s%s' SALT NONCE | sha256sum
VECTORS = [
    ("00", 1, "10", "0b08e3dcc50fe4e5cee9b0b3a671a8db936f8335ba9050696d41cbb9a07f22e3"),
    ("abc", 2, "252", "00e6fe2fa1d885b56b771f9f9098ddc018d72efb61c0e10367bb5a8b82289f6a"),
    ("abc", 3, "1322", "000213955c51ad382c14a1634987938c793bb005b6106a3943a16795b65227cd"),
    ("8f2a1c3d4e5f60718293a4b5c6d7e8f9", 3, "87", "00091b3df85818d6b60b48fa07d948599d954e18a61255009958fae27e874770"),
    ("8f2a1c3d4e5f60718293a4b5c6d7e8f9", 4, "21820", "0000805c24f8d450f28c0a14363a12913b66ae89d31b36f005c7aeacabd67a79"),
]


def solves(salt, nonce, difficulty):
    return hashlib.sha256((salt + nonce).encode()).hexdigest().startswith("0" * difficulty)


# (salt, bits, smallest nonce): the bits vectors of docs/protocol.md section 10.
BITS_VECTORS = [
    ("00112233445566778899aabbccddeeff", 1, "1"),
    ("00112233445566778899aabbccddeeff", 9, "1306"),
    ("00112233445566778899aabbccddeeff", 13, "2455"),
    ("6c17a261001047c8b3e83591c3269c2e", 10, "398"),
    ("6c17a261001047c8b3e83591c3269c2e", 15, "37477"),
]


def zero_bits(salt, nonce):
    n = int.from_bytes(hashlib.sha256((salt + nonce).encode()).digest(), "big")
    return 256 - n.bit_length()


class BitsTest(unittest.TestCase):
    def test_bits_give_the_smallest_nonce_of_the_protocol_vectors(self):
        for salt, bits, nonce in BITS_VECTORS:
            with self.subTest(salt=salt, bits=bits):
                self.assertEqual(pow_shield.solve(salt, -(-bits // 4), bits=bits, processes=1), nonce)

    def test_is_solution_with_bits_counts_bits_not_hex_digits(self):
        salt, nonce = "6c17a261001047c8b3e83591c3269c2e", "37477"
        self.assertEqual(zero_bits(salt, nonce), 15)
        self.assertTrue(pow_shield.is_solution(salt, nonce, 4, bits=15))
        self.assertFalse(pow_shield.is_solution(salt, nonce, 4, bits=16))
        self.assertFalse(pow_shield.is_solution(salt, nonce, 4))

    def test_bits_above_48_are_unsolvable_and_max_difficulty_counts_hex_digits(self):
        with self.assertRaises(pow_shield.Unsolvable):
            pow_shield.solve("00", 13, bits=49)
        with self.assertRaises(pow_shield.TooDifficult):
            pow_shield.solve("00", 5, bits=17, max_difficulty=4)
        self.assertTrue(pow_shield.solve("00", 4, bits=16, max_difficulty=4))

    def test_parallel_workers_solve_for_bits(self):
        salt = "00112233445566778899aabbccddeeff"
        nonce = pow_shield.solve(salt, 4, bits=13, processes=2)
        self.assertGreaterEqual(zero_bits(salt, nonce), 13)

    def test_solver_info_names_the_solver_that_runs(self):
        info = pow_shield.solver_info()
        self.assertIn(info["solver"], ("native", "python"))
        if info["solver"] == "native":
            self.assertTrue(info["engine"].startswith(("sha-ni", "portable")), info)
        else:
            self.assertEqual(info["engine"], "hashlib")
            self.assertTrue(info["reason"])


class SolverChoiceTest(unittest.TestCase):
    PACKAGE_DIR = os.path.join(os.path.dirname(__file__), "..")

    def run_python(self, code, **env):
        import json
        import subprocess

        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONPATH": self.PACKAGE_DIR, **env},
            capture_output=True, text=True, check=True,
        ).stdout
        return [json.loads(line) for line in out.splitlines()]

    def test_the_pure_python_solver_can_be_forced_and_says_so(self):
        info, nonce = self.run_python(
            "import json, pow_shield\n"
            "print(json.dumps(pow_shield.solver_info()))\n"
            "print(json.dumps(pow_shield.solve('00112233445566778899aabbccddeeff', 4, bits=13, processes=1)))",
            POW_SHIELD_PURE_PYTHON="1",
        )
        self.assertEqual(info["solver"], "python")
        self.assertIn("POW_SHIELD_PURE_PYTHON", info["reason"])
        self.assertEqual(nonce, "2455")

    def installed_without_native(self, skipped):
        """A copy of the package as ``pip install`` leaves it when the native
        solver was not built for ``skipped`` (its ``_build.py``)."""
        import shutil
        import tempfile

        site = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, site)
        shutil.copytree(
            os.path.join(self.PACKAGE_DIR, "pow_shield"),
            os.path.join(site, "pow_shield"),
            ignore=shutil.ignore_patterns("_native*", "__pycache__"),
        )
        with open(os.path.join(site, "pow_shield", "_build.py"), "w") as f:
            f.write(f"NATIVE_SKIPPED = {skipped!r}\n")
        return site

    def run_in(self, site, code):
        import subprocess

        env = {k: v for k, v in os.environ.items() if k != "POW_SHIELD_PURE_PYTHON"}
        done = subprocess.run(
            [sys.executable, "-c", code], env={**env, "PYTHONPATH": site}, capture_output=True, text=True, check=True
        )
        return done.stdout, done.stderr

    SOLVE_TWICE = (
        "import pow_shield\n"
        "print(pow_shield.solver_info()['reason'])\n"
        "pow_shield.solve('00', 2, processes=1)\n"
        "pow_shield.solve('00', 2, processes=1)\n"
    )

    def test_an_install_without_cargo_says_why_and_warns_once_on_the_first_solve(self):
        site = self.installed_without_native("no Rust toolchain (cargo) was found")
        out, err = self.run_in(site, self.SOLVE_TWICE)
        self.assertIn("not built: no Rust toolchain (cargo) was found at install; install a Rust toolchain", out)
        self.assertNotIn("circular import", out)
        self.assertEqual(err.count("RuntimeWarning: pow_shield solves in pure Python"), 1, err)

    def test_a_failed_build_says_so_and_warns(self):
        site = self.installed_without_native("")
        out, err = self.run_in(site, self.SOLVE_TWICE)
        self.assertIn("its build failed at install (pip install -v shows why)", out)
        self.assertIn("RuntimeWarning", err)

    def test_a_build_skipped_on_purpose_or_the_source_tree_warns_nothing(self):
        site = self.installed_without_native("POW_SHIELD_NO_NATIVE was set")
        out, err = self.run_in(site, self.SOLVE_TWICE)
        self.assertIn("POW_SHIELD_NO_NATIVE was set", out)
        self.assertNotIn("RuntimeWarning", err)
        if pow_shield.solver_info()["solver"] == "python":
            out, err = self.run_in(self.PACKAGE_DIR, self.SOLVE_TWICE)
            self.assertIn("source tree", out)
            self.assertNotIn("RuntimeWarning", err)

    @unittest.skipUnless(pow_shield.solver_info()["solver"] == "native", "the native extension is not built")
    def test_the_native_search_agrees_with_the_pure_python_one(self):
        import random

        rng = random.Random(21)
        for _ in range(40):
            salt = "".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(1, 90)))
            bits = rng.randint(1, 11)
            start = rng.choice([0, rng.randint(0, 10**6), rng.randint(0, 10**19)])
            end = start + rng.randint(1, 3000)
            pure = _solver._search(hashlib.sha256(salt.encode()), _solver._threshold(bits), start, end)
            self.assertEqual(_solver._native.search(salt, bits, start, end), pure, (salt, bits, start))

    @unittest.skipUnless(pow_shield.solver_info()["solver"] == "native", "the native extension is not built")
    def test_native_threads_solve_for_bits(self):
        salt = "6c17a261001047c8b3e83591c3269c2e"
        nonce = pow_shield.solve(salt, 5, bits=18, processes=3)
        self.assertGreaterEqual(zero_bits(salt, nonce), 18)
        self.assertEqual(pow_shield.solve(salt, 5, bits=18, processes=1), "300975")


class SolveTest(unittest.TestCase):
    def test_vectors_hash_as_recorded(self):
        for salt, _d, nonce, digest in VECTORS:
            self.assertEqual(hashlib.sha256((salt + nonce).encode()).hexdigest(), digest)

    def test_single_process_finds_the_smallest_nonce(self):
        for salt, d, nonce, _ in VECTORS:
            with self.subTest(salt=salt, difficulty=d):
                self.assertEqual(pow_shield.solve(salt, d, processes=1), nonce)

    def test_every_nonce_below_the_answer_fails(self):
        for salt, d, nonce, _ in VECTORS[:4]:
            self.assertFalse(any(solves(salt, str(n), d) for n in range(int(nonce))))

    def test_nonce_is_decimal_ascii_of_at_most_20_digits(self):
        nonce = pow_shield.solve(os.urandom(16).hex(), 3)
        self.assertTrue(nonce.isascii() and nonce.isdigit() and len(nonce) <= 20)

    def test_random_salts_give_valid_solutions(self):
        for d in (1, 2, 3):
            salt = os.urandom(16).hex()
            self.assertTrue(solves(salt, pow_shield.solve(salt, d), d))

    def test_difficulty_zero_needs_no_work(self):
        with mock.patch.object(_solver, "_solve_here", side_effect=AssertionError("searched")):
            self.assertEqual(pow_shield.solve("anything", 0), "0")

    def test_threshold_matches_leading_hex_zeros_at_every_difficulty(self):
        # digests with exactly k leading zero nibbles, then a 1 or an f
        for d in range(1, 65):
            threshold = _solver._threshold(4 * d)
            for k in range(0, 64):
                for nib in "1f":
                    hexd = ("0" * k + nib).ljust(64, "f")[:64]
                    digest = bytes.fromhex(hexd)
                    self.assertEqual(digest < threshold, hexd.startswith("0" * d), (d, k, nib))
            self.assertTrue(bytes(32) < threshold)

    def test_is_solution_is_the_servers_rule(self):
        for salt, d, nonce, digest in VECTORS:
            self.assertTrue(pow_shield.is_solution(salt, nonce, d))
            self.assertEqual(pow_shield.is_solution(salt, nonce, d + 1), digest.startswith("0" * (d + 1)))
        self.assertFalse(pow_shield.is_solution("00", "1" * 21, 0))
        self.assertFalse(pow_shield.is_solution("00", "-1", 0))
        self.assertFalse(pow_shield.is_solution("00", "", 0))

    def test_parallel_search_finds_a_valid_nonce_and_stops_its_workers(self):
        for salt, d, _nonce, _ in VECTORS:
            with self.subTest(salt=salt, difficulty=d):
                self.assertTrue(solves(salt, pow_shield.solve(salt, d, processes=2), d))
        self.assertEqual(multiprocessing.active_children(), [])

    def test_default_is_one_process_below_difficulty_5(self):
        self.assertEqual(_solver.default_processes(4), 1)
        self.assertGreaterEqual(_solver.default_processes(5), 1)


class LimitTest(unittest.TestCase):
    def test_max_difficulty_raises_too_difficult_before_any_work(self):
        with mock.patch.object(_solver.hashlib, "sha256", side_effect=AssertionError("hashed")):
            with self.assertRaises(pow_shield.TooDifficult) as cm:
                pow_shield.solve("salt", 9, max_difficulty=4)
        self.assertEqual((cm.exception.difficulty, cm.exception.max_difficulty), (9, 4))
        self.assertIsInstance(cm.exception, pow_shield.Unsolvable)

    def test_max_difficulty_equal_to_difficulty_solves(self):
        self.assertTrue(solves("abc", pow_shield.solve("abc", 2, max_difficulty=2), 2))

    def test_max_solve_time_raises_solve_timeout(self):
        # 16 ** 12 hashes are out of reach here: only the deadline can end this
        with self.assertRaises(pow_shield.SolveTimeout) as cm:
            pow_shield.solve("salt", 12, max_solve_time=0.05, processes=1)
        self.assertEqual(cm.exception.difficulty, 12)

    def test_max_solve_time_is_30_s_by_default_and_none_is_no_limit(self):
        self.assertEqual(pow_shield.DEFAULT_MAX_SOLVE_TIME, 30.0)
        self.assertEqual(inspect.signature(pow_shield.solve).parameters["max_solve_time"].default, 30.0)
        self.assertEqual(pow_shield.solve("abc", 2, max_solve_time=None, processes=1), "252")

    def test_max_solve_time_stops_the_parallel_search_too(self):
        with self.assertRaises(pow_shield.SolveTimeout):
            pow_shield.solve("salt", 12, max_solve_time=0.05, processes=2)
        self.assertEqual(multiprocessing.active_children(), [])

    def test_a_set_stop_event_cancels_the_solve(self):
        for processes in (1, 2):
            stop = threading.Event()
            stop.set()
            with self.subTest(processes=processes), self.assertRaises(pow_shield.Cancelled):
                pow_shield.solve("salt", 12, processes=processes, stop=stop)
        self.assertEqual(multiprocessing.active_children(), [])

    def test_stop_ends_a_running_solve(self):
        stop = threading.Event()
        outcome = []

        def run():
            try:
                pow_shield.solve("salt", 12, processes=1, stop=stop)
            except pow_shield.Cancelled as exc:
                outcome.append(exc)

        t = threading.Thread(target=run)
        t.start()
        stop.set()
        t.join(60)  # generous: the search looks at the event every chunk
        self.assertFalse(t.is_alive())
        self.assertEqual(len(outcome), 1)

    def test_workers_are_not_forked_while_other_threads_run(self):
        release = threading.Event()
        t = threading.Thread(target=release.wait)
        t.start()
        try:
            self.assertIn(_solver._context().get_start_method(), ("forkserver", "spawn"))
        finally:
            release.set()
            t.join()

    def test_a_parallel_solve_beside_another_thread_finds_a_valid_nonce(self):
        release = threading.Event()
        t = threading.Thread(target=release.wait)
        t.start()
        try:
            nonce = pow_shield.solve("salt", 3, processes=2)
        finally:
            release.set()
            t.join()
        self.assertTrue(solves("salt", nonce, 3))
        self.assertEqual(multiprocessing.active_children(), [])

    def test_impossible_difficulties_are_unsolvable(self):
        for bad in (-1, 13, 65, 1.5, True, "3"):
            with self.subTest(difficulty=bad), self.assertRaises(pow_shield.Unsolvable):
                pow_shield.solve("salt", bad)

    def test_salt_must_be_text(self):
        with self.assertRaises(TypeError):
            pow_shield.solve(b"salt", 1)

    def test_bad_arguments_are_value_errors(self):
        with self.assertRaises(ValueError):
            pow_shield.solve("salt", 1, processes=0)
        for bad in (-1, float("nan"), "30", True):
            with self.subTest(max_solve_time=bad), self.assertRaises(ValueError):
                pow_shield.solve("salt", 1, max_solve_time=bad)


class FakeNative:
    """``_native`` standing in for the extension: finds nothing; ``search``
    calls ``during`` (when set) while it is searching."""

    def __init__(self, during=None):
        self.during = during

    def search(self, salt, bits, start, end):
        if self.during is not None:
            self.during()
        return None

    def engine(self):
        return "fake"


class ExitTest(unittest.TestCase):
    """At exit no thread is left inside the native search (with the GIL
    released): taking the GIL back during finalization aborts the process."""

    def patch(self, native):
        calls = _solver._NativeCalls()
        for name, value in (("_native", native), ("_NATIVE_CALLS", calls)):
            patcher = mock.patch.object(_solver, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        return calls

    def test_a_native_search_started_once_the_program_exits_raises_cancelled(self):
        self.patch(FakeNative()).close()
        with self.assertRaises(pow_shield.Cancelled):
            pow_shield.solve("salt", 12, max_solve_time=None, processes=1)

    def test_exit_waits_for_the_native_searches_in_progress(self):
        inside, leave, order = threading.Event(), threading.Event(), []

        def during():
            inside.set()
            leave.wait()
            order.append("search left")

        calls = self.patch(FakeNative(during))
        solver = threading.Thread(target=lambda: self.assertRaises(
            pow_shield.Cancelled, pow_shield.solve, "salt", 12, max_solve_time=None, processes=1))
        solver.start()
        inside.wait()
        closer = threading.Thread(target=lambda: (calls.close(None), order.append("exit went on")))
        closer.start()
        while not calls.closed:  # the exit has begun
            leave.wait(0.001)
        order.append("search released")
        leave.set()
        closer.join()
        solver.join()
        self.assertEqual(order, ["search released", "search left", "exit went on"])

    def test_solver_threads_stopped_by_the_exit_raise_cancelled(self):
        searching = threading.Event()
        calls = self.patch(FakeNative(searching.set))
        raised = []

        def solve():
            try:
                pow_shield.solve("salt", 12, max_solve_time=None, processes=3)
            except Exception as exc:
                raised.append(exc)

        solver = threading.Thread(target=solve)
        solver.start()
        searching.wait()
        calls.close(None)
        solver.join()
        self.assertEqual([type(e) for e in raised], [pow_shield.Cancelled])

    @unittest.skipUnless(pow_shield.solver_info()["solver"] == "native", "the native extension is not built")
    def test_a_program_ending_mid_native_solve_exits_0(self):
        import subprocess

        code = (
            "import threading, time, pow_shield\n"
            "def solve():\n"
            "    try:\n"
            "        pow_shield.solve('00112233445566778899aabbccddeeff', 12, max_solve_time=None, processes=2)\n"
            "    except pow_shield.Cancelled:\n"
            "        pass\n"
            "threading.Thread(target=solve, daemon=True).start()\n"
            "time.sleep(0.05)\n"
        )
        env = {**os.environ, "PYTHONPATH": SolverChoiceTest.PACKAGE_DIR}
        for _ in range(3):
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            self.assertEqual((done.returncode, done.stderr), (0, ""))


if __name__ == "__main__":
    unittest.main()
