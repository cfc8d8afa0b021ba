"""The seeded ALFWorld game generator (agent_envs/alfworld/generator.py).

Every engine check here drives the real TextWorld PDDL engine (PddlEnv + alfworld's
AlfredDemangler(shuffle=False) + AlfredInfos): generated walkthroughs must be admissible
step by step and win on the last command.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

pytest.importorskip("textworld")  # the `alfworld` extra; CI installs it (strict skips)
pytest.importorskip("alfworld")

from agent_envs.alfworld import generator as gen
from agent_envs.alfworld.generator import (
    TASK_TYPES,
    GameVerificationError,
    GeneratedGame,
    Verifier,
    build_game,
    demangled_names,
    ensure_generated,
    generate_game,
    verify_game,
)
from agent_envs.alfworld.generator import cache as cache_module
from agent_envs.alfworld.generator import games as games_module
from agent_envs.alfworld.generator.vocabulary import VOCABULARY_PATH, logic_files

FOLDER = re.compile(
    r"^(?P<type>[a-z_]+)-(?P<obj>[A-Za-z]+)-None-(?P<recep>[A-Za-z]+)-(?P<index>\d+)$"
)


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    return Verifier()


@pytest.fixture(scope="module")
def small_cache(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Six verified games (one per type), generated once for the cache tests."""
    return ensure_generated(n=6, seed=11, cache_dir=tmp_path_factory.mktemp("gen") / "c", workers=1)


# ---------------------------------------------------------------------------- names


def test_demangled_names_follow_the_engine_rule() -> None:
    # Sorted lowercased ids within one name are numbered from the count down:
    #   "mug_bar__minus_01..." < "mug_bar__plus_00..." < "mug_bar__plus_02..." (since "m" < "p",
    #   then "00" < "02") -> mug 3, mug 2, mug 1.
    # A basin receptacle named after its sink gets "basin" appended ("sinkbasin 1"), while the
    # sink object keeps "sink 1"; ids without "_bar_" keep their text.
    ids = [
        "Mug_bar__plus_02_dot_00",
        "Mug_bar__minus_01_dot_00",
        "Mug_bar__plus_00_dot_50",
        "Sink_bar__plus_01_dot_00",
        "Sink_bar__plus_01_dot_00_bar_SinkBasin",
        "agent1",
    ]
    names = demangled_names(ids)
    assert names == {
        "mug_bar__plus_02_dot_00": "mug 1",
        "mug_bar__minus_01_dot_00": "mug 3",
        "mug_bar__plus_00_dot_50": "mug 2",
        "sink_bar__plus_01_dot_00": "sink 1",
        "sink_bar__plus_01_dot_00_bar_sinkbasin": "sinkbasin 1",
        "agent1": "agent1",
    }


def test_demangled_names_match_the_real_engine(verifier: Verifier) -> None:
    game = generate_game(3, "pick_clean_then_place_in_recep")
    verifier._env.load(dict(game))
    state = verifier._env.reset()
    engine = {info.id: info.name.strip() for info in state["_entity_infos"].values()}
    ours = demangled_names(list(engine))
    assert {k: v for k, v in ours.items() if "_bar_" in k} == {
        k: v for k, v in engine.items() if "_bar_" in k
    }
    assert any(v.startswith("sinkbasin ") for v in engine.values())


# ---------------------------------------------------------------------------- games (no engine)


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_generate_game_is_deterministic(task_type: str) -> None:
    a = json.dumps(generate_game(42, task_type))
    assert a == json.dumps(generate_game(42, task_type))
    assert a == json.dumps(generate_game(random.Random("rubricgym-alfworld:42"), task_type))
    assert a != json.dumps(generate_game(43, task_type))


def _init(problem: str) -> str:
    return problem[problem.index("(:init") : problem.index("(:goal")]


def _in_receptacle(problem: str) -> dict[str, str]:
    return dict(re.findall(r"\(inReceptacle (\S+) (\S+)\)", _init(problem)))


def _types(problem: str, kind: str) -> dict[str, str]:
    return dict(re.findall(rf"\({kind}Type (\S+) (\w+)Type\)", _init(problem)))


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_games_mirror_the_real_data(task_type: str) -> None:
    vocab = gen.load_vocabulary()
    shipped_domain, shipped_grammar = logic_files()
    for seed in range(25):
        built = build_game(seed, task_type)
        game = built.game
        assert list(game) == ["pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"]
        assert game["solvable"] is True
        assert game["pddl_domain"] == shipped_domain
        assert game["grammar"] == shipped_grammar.replace("UNKNOWN GOAL", built.sentence)
        assert built.sentence.split()[0] in {
            "put",
            "find",
            "clean",
            "heat",
            "cool",
            "look",
            "examine",
        }
        m = FOLDER.match(built.folder_name(7))
        assert m and m["type"] == task_type and m["obj"] == built.target and m["index"] == "7"
        problem = game["pddl_problem"]
        # every type constant the domain can name is declared (SinkBasinType, KnifeType, ...)
        for t in vocab.object_types:
            assert f"{t}Type - otype" in problem
        for t in vocab.receptacle_types:
            assert f"{t}Type - rtype" in problem
        objects, receptacles = _types(problem, "object"), _types(problem, "receptacle")
        inside = _in_receptacle(problem)
        targets = [o for o, t in objects.items() if t == built.target]
        assert len(targets) >= (2 if task_type == "pick_two_obj_and_place" else 1)
        if task_type == "look_at_obj_in_light":
            assert built.destination == "DeskLamp"
            lamps = [o for o, t in objects.items() if t == "DeskLamp"]
            assert len(lamps) == 1 and f"(toggleable {lamps[0]})" in problem and lamps[0] in inside
            assert game["walkthrough"][-1].startswith(("use desklamp", "take "))
        else:
            # no target starts in a receptacle of the destination type (not won at the start)
            assert all(receptacles[inside[o]] != built.destination for o in targets)
            assert built.destination in receptacles.values()
            assert game["walkthrough"][-1].startswith(f"move {built.target.lower()} ")
        needed = {
            "pick_clean_then_place_in_recep": "SinkBasin",
            "pick_heat_then_place_in_recep": "Microwave",
            "pick_cool_then_place_in_recep": "Fridge",
        }.get(task_type)
        if needed:
            assert needed in receptacles.values()
            verb = task_type.split("_")[1]  # clean / heat / cool
            assert sum(c.startswith(f"{verb} ") for c in game["walkthrough"]) == 1
        # the canContain table only names types present in the scene, as in the real data
        for rt, ot in re.findall(r"\(canContain (\w+)Type (\w+)Type\)", problem):
            assert rt in receptacles.values() and ot in objects.values()
            assert ot in vocab.can_contain[rt]


def test_games_are_varied_and_non_trivial() -> None:
    built = [build_game(f"v{i}", TASK_TYPES[i % 6]) for i in range(240)]
    rooms = Counter(b.room for b in built)
    assert set(rooms) == {"kitchen", "livingroom", "bedroom", "bathroom"}
    assert len({b.target for b in built}) >= 30
    assert len({b.destination for b in built}) >= 12
    opened = sum(any(c.startswith("open ") for c in b.game["walkthrough"]) for b in built)
    assert opened >= 0.3 * len(built)  # targets or destinations often behind closed doors
    for b in built:
        receptacles = _types(b.game["pddl_problem"], "receptacle")
        assert len(receptacles) >= 8  # several places to search


# ---------------------------------------------------------------------------- engine


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_walkthroughs_win_in_the_real_engine(task_type: str, verifier: Verifier) -> None:
    for seed in (0, 1):
        game = generate_game(seed, task_type)
        steps = verifier.verify(game, label=f"{task_type}/{seed}")
        assert steps == len(game["walkthrough"]) >= 3


def test_verification_names_the_failing_step(verifier: Verifier) -> None:
    game = generate_game(5, "pick_heat_then_place_in_recep")
    bad = dict(game, walkthrough=["fly to the moon", *game["walkthrough"]])
    with pytest.raises(GameVerificationError, match=r"step 0 'fly to the moon' is not admissible"):
        verifier.verify(bad, label="bad")
    short = dict(game, walkthrough=game["walkthrough"][:-1])
    with pytest.raises(GameVerificationError, match="not won after the last"):
        verifier.verify(short, label="short")
    with pytest.raises(GameVerificationError, match="no walkthrough"):
        verifier.verify(dict(game, walkthrough=[]))


# ---------------------------------------------------------------------------- cache


def test_cache_layout_balance_and_manifest(small_cache: list[Path], verifier: Verifier) -> None:
    assert small_cache == sorted(small_cache) and len(small_cache) == 6
    root = small_cache[0].parents[2]
    kinds = Counter()
    for path in small_cache:
        assert path.name == "game.tw-pddl" and path.parent.name == "trial_0"
        m = FOLDER.match(path.parent.parent.name)
        assert m, path
        kinds[m["type"]] += 1
    # generation verified each game; replay one file as written to check what reached the disk
    pick_two = next(p for p in small_cache if "pick_two_obj_and_place" in str(p))
    assert verify_game(pick_two, verifier) == len(json.loads(pick_two.read_text())["walkthrough"])
    assert kinds == Counter({t: 1 for t in TASK_TYPES})
    manifest = json.loads((root / "manifest.json").read_text())
    assert (
        manifest["n"] == 6 and manifest["seed"] == 11 and manifest["task_types"] == list(TASK_TYPES)
    )
    assert [g["index"] for g in manifest["games"]] == list(range(6))
    # cycle order: index i has task type TASK_TYPES[i % 6]
    assert [g["task_type"] for g in manifest["games"]] == list(TASK_TYPES)
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_same_seed_gives_byte_identical_files(small_cache: list[Path], tmp_path: Path) -> None:
    again = ensure_generated(n=6, seed=11, cache_dir=tmp_path / "again", workers=1)
    root_a, root_b = small_cache[0].parents[2], again[0].parents[2]
    assert [p.relative_to(root_a) for p in small_cache] == [p.relative_to(root_b) for p in again]
    for a, b in zip(small_cache, again):
        assert a.read_bytes() == b.read_bytes()
    assert (root_a / "manifest.json").read_bytes() == (root_b / "manifest.json").read_bytes()


def test_a_finished_cache_is_reused_without_the_engine(
    small_cache: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = small_cache[0].parents[2]

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cache was regenerated")

    monkeypatch.setattr(cache_module.GameSet, "_generate", boom)
    assert ensure_generated(n=6, seed=11, cache_dir=root) == small_cache
    assert gen.GameSet(n=6, seed=11, cache_dir=root).path_at(5) == small_cache[5]


def test_default_cache_dir_honours_rubricgym_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUBRICGYM_CACHE", str(tmp_path))
    assert gen.default_cache_dir(60, 0) == tmp_path / "alfworld" / "generated-0-60"
    subset = gen.default_cache_dir(60, 0, ["look_at_obj_in_light"])
    assert subset.parent == tmp_path / "alfworld" and subset.name.startswith("generated-0-60-")
    paths = ensure_generated(
        n=2, seed=3, task_types=["look_at_obj_in_light", "pick_and_place_simple"], workers=1
    )
    assert paths[0].parents[2] == gen.default_cache_dir(
        2, 3, ["pick_and_place_simple", "look_at_obj_in_light"]
    )
    # subset cycles in canonical order: index 0 pick_and_place_simple, index 1 look_at_obj_in_light
    assert [p.parent.parent.name.split("-")[0] for p in paths] == [
        "look_at_obj_in_light",
        "pick_and_place_simple",
    ]
    assert paths[0].parent.parent.name.endswith("-1") and paths[1].parent.parent.name.endswith("-0")


def test_an_interrupted_generation_keeps_its_finished_games(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "c"
    reference = ensure_generated(n=3, seed=0, cache_dir=tmp_path / "ref", workers=1)
    real_build = games_module.build_game
    calls = {"n": 0}

    def crash_on_second(*args: object, **kwargs: object) -> GeneratedGame:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated crash while generating")
        return real_build(*args, **kwargs)

    monkeypatch.setattr(games_module, "build_game", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        ensure_generated(n=3, seed=0, cache_dir=cache, workers=1)
    # game 0 was finished and kept (its file and its entry); no manifest, no temp files
    assert not (cache / "manifest.json").exists()
    assert sorted(p.name for p in (cache / ".partial").iterdir()) == ["0.json", "spec.json"]
    assert not list(cache.rglob("*.tmp"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "ref"]
    monkeypatch.setattr(games_module, "build_game", real_build)
    calls["n"] = 0
    built = []
    monkeypatch.setattr(
        games_module, "build_game", lambda *a, **k: built.append(a[1]) or real_build(*a, **k)
    )
    paths = ensure_generated(n=3, seed=0, cache_dir=cache, workers=1)
    # only games 1 and 2 were built again (types TASK_TYPES[1], TASK_TYPES[2]), and the set is
    # byte for byte the one generated in one go
    assert built == [TASK_TYPES[1], TASK_TYPES[2]]
    assert [p.relative_to(cache) for p in paths] == [p.relative_to(tmp_path / "ref") for p in reference]
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in reference]
    assert (cache / "manifest.json").read_bytes() == (tmp_path / "ref" / "manifest.json").read_bytes()
    assert not (cache / ".partial").exists()


def test_a_game_set_generates_only_the_types_it_is_asked_for(tmp_path: Path) -> None:
    """The lazy path the environment takes: sorted position -> that type's block only."""
    reference = ensure_generated(n=12, seed=2, cache_dir=tmp_path / "ref", workers=1)
    lazy = gen.GameSet(n=12, seed=2, cache_dir=tmp_path / "lazy", workers=1)
    # 12 games, 2 per type; types sorted as the ids sort: look_at_obj_in_light (positions 0-1),
    # pick_and_place_simple (2-3), pick_clean_... (4-5), pick_cool_... (6-7), pick_heat_... (8-9),
    # pick_two_obj_and_place (10-11)
    assert lazy.bounds["look_at_obj_in_light"] == (0, 2)
    assert lazy.bounds["pick_two_obj_and_place"] == (10, 12)
    assert lazy.indices("pick_heat_then_place_in_recep") == [3, 9]
    got = lazy.path_at(9)
    assert got.relative_to(tmp_path / "lazy") == reference[9].relative_to(tmp_path / "ref")
    assert got.read_bytes() == reference[9].read_bytes()
    made = sorted(p.parent.parent.name for p in (tmp_path / "lazy").glob("*/trial_0/game.tw-pddl"))
    assert [m.split("-")[0] for m in made] == ["pick_heat_then_place_in_recep"] * 2
    assert not (tmp_path / "lazy" / "manifest.json").exists()
    # the rest on demand; the finished cache equals the one generated in one go
    assert [p.relative_to(tmp_path / "lazy") for p in lazy.all()] == [
        p.relative_to(tmp_path / "ref") for p in reference
    ]
    ref_manifest = (tmp_path / "ref" / "manifest.json").read_bytes()
    assert (tmp_path / "lazy" / "manifest.json").read_bytes() == ref_manifest
    with pytest.raises(IndexError, match="out of range 0..11"):
        lazy.path_at(12)


def _generate_in_process(cache: str) -> list[str]:
    return [str(p) for p in ensure_generated(n=2, seed=5, cache_dir=Path(cache), workers=1)]


@pytest.mark.slow
def test_concurrent_first_use_from_two_processes(tmp_path: Path) -> None:
    # e.g. two rollout workers touching split="generated" at once: both get the same games
    cache = tmp_path / "shared"
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        a, b = pool.map(_generate_in_process, [str(cache), str(cache)])
    assert a == b and len(a) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared"]  # no temp dirs left over
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith(".")) == [".lock"]
    assert ensure_generated(n=2, seed=5, cache_dir=cache) == [Path(p) for p in a]


def test_a_reader_racing_the_finishing_process_takes_its_manifest(tmp_path: Path, monkeypatch) -> None:
    # The race behind a leftover .partial/: process B reads the manifest (not there yet), then
    # process A writes it and removes .partial/, then B reads the partial entries (gone). B
    # must take A's manifest, not generate the games again into a new .partial/.
    cache = tmp_path / "c"
    finished = ensure_generated(n=2, seed=5, cache_dir=cache, workers=1)
    real_read = cache_module._read_json
    calls = {"manifest": 0}

    def read_as_before_the_finish(path: Path):
        if path.name == cache_module.MANIFEST_NAME:
            calls["manifest"] += 1
            if calls["manifest"] == 1:
                return None  # B's first look: A has not written it yet
        return real_read(path)

    monkeypatch.setattr(cache_module, "_read_json", read_as_before_the_finish)
    entries = gen.GameSet(n=2, seed=5, cache_dir=cache, workers=1)._partial_entries()
    assert sorted(entries) == [0, 1] and calls["manifest"] == 2
    assert sorted(cache / e["path"] for e in entries.values()) == finished
    assert not (cache / cache_module.PARTIAL_DIR).exists()


def test_a_damaged_cache_is_regenerated(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    paths = ensure_generated(n=1, seed=4, cache_dir=cache, workers=1)
    original = paths[0].read_bytes()
    paths[0].write_text("{ truncated")
    assert ensure_generated(n=1, seed=4, cache_dir=cache, workers=1) == paths
    assert paths[0].read_bytes() == original


def test_cache_dir_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"mine.*not a generated-games cache"):
        ensure_generated(n=1, cache_dir=foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        ensure_generated(n=1, cache_dir=a_file)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": 0}, ValueError, "n must be >= 1"),
        ({"n": -3}, ValueError, "n must be >= 1"),
        ({"n": "5"}, TypeError, "n must be an int"),
        ({"n": True}, TypeError, "n must be an int"),
        ({"seed": "zero"}, TypeError, "seed must be an int"),
        ({"task_types": []}, ValueError, "task_types is empty"),
        ({"task_types": "pick_and_place_simple"}, TypeError, "sequence of task-type names"),
        (
            {"task_types": ["pick_and_place_simple", "juggle"]},
            ValueError,
            "unknown ALFWorld task type 'juggle'",
        ),
        ({"workers": 0}, ValueError, "workers must be a positive int"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, error: type, match: str, tmp_path: Path) -> None:
    with pytest.raises(error, match=match):
        ensure_generated(cache_dir=tmp_path / "never", **kwargs)
    assert not (tmp_path / "never").exists()


def test_generate_game_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="look_at_obj_in_light"):  # lists the valid types
        generate_game(0, "pick_and_juggle")
    with pytest.raises(TypeError, match="rng_or_seed"):
        generate_game(1.5, "pick_and_place_simple")  # type: ignore[arg-type]


def test_corrupt_vocabulary_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "scenes.json"
    bad.write_text("{ not json")
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        gen.load_vocabulary(bad)
    raw = json.loads(VOCABULARY_PATH.read_text())
    raw["rooms"]["kitchen"]["objects"].append("Unicorn")
    bad.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="unknown object type 'Unicorn'"):
        gen.load_vocabulary(bad)


def test_unreadable_game_file_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "game.tw-pddl"
    broken.write_text("{")
    with pytest.raises(GameVerificationError, match=re.escape(str(broken))):
        verify_game(broken)


def test_problem_predicates_are_those_of_the_real_data(alfworld_data: Path) -> None:
    real: set[str] = set()
    for path in sorted((alfworld_data / "json_2.1.1" / "valid_seen").glob("*/*/game.tw-pddl"))[:40]:
        real |= set(re.findall(r"\((\w+) ", _init(json.loads(path.read_text())["pddl_problem"])))
    ours: set[str] = set()
    for i, task_type in enumerate(TASK_TYPES * 5):
        ours |= set(re.findall(r"\((\w+) ", _init(generate_game(i, task_type)["pddl_problem"])))
    assert ours <= real, ours - real


def test_cli_generates_games(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from agent_envs.alfworld import gen_cli

    app, data_app = typer.Typer(), typer.Typer()
    app.add_typer(data_app, name="data")
    app.callback()(lambda: None)
    gen_cli.register(app, data_app)
    out = tmp_path / "games"
    result = CliRunner().invoke(
        app, ["data", "generate-alfworld", "--n", "1", "--seed", "9", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "1 verified game(s)" in result.output
    assert len(list(out.glob("*/trial_0/game.tw-pddl"))) == 1
    bad = CliRunner().invoke(
        app, ["data", "generate-alfworld", "--task-type", "juggle", "--out", str(tmp_path / "x")]
    )
    assert bad.exit_code == 2 and "juggle" in bad.output


# ---------------------------------------------------------------------------- slow


# The 240-game check (first-draw verification + replay) is in test_alfworld_replay.py.


@pytest.mark.slow
def test_worker_count_does_not_change_the_files(tmp_path: Path) -> None:
    import subprocess
    import sys

    one = ensure_generated(n=8, seed=21, cache_dir=tmp_path / "one", workers=1)
    # two worker processes, started from a plain script without a __main__ guard (the way a
    # user's first `reset(options={"split": "generated"})` may run)
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from pathlib import Path\n"
        "from agent_envs.alfworld.generator import ensure_generated\n"
        f"ensure_generated(n=8, seed=21, cache_dir=Path({str(tmp_path / 'two')!r}), workers=2)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], check=False, capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    two = sorted((tmp_path / "two").glob("*/trial_0/game.tw-pddl"))
    assert [p.relative_to(tmp_path / "two") for p in two] == [
        p.relative_to(tmp_path / "one") for p in one
    ]
    assert [p.read_bytes() for p in one] == [p.read_bytes() for p in two]


def test_a_finished_read_only_cache_is_used(small_cache: list[Path], tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "ro"
    shutil.copytree(small_cache[0].parents[2], root)
    (root / ".lock").unlink(missing_ok=True)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        paths = ensure_generated(n=6, seed=11, cache_dir=root)
        assert [p.relative_to(root) for p in paths] == [p.relative_to(small_cache[0].parents[2]) for p in small_cache]
        assert not (root / ".lock").exists()
    finally:
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
