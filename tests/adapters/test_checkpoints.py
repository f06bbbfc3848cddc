"""exactbatch.torch's and exactbatch.ray's checkpoint helpers in one process: the ranks
simulated by loaders of each shard, the checkpoints by folders; bad input named.

The runs under torchrun and Ray Train are tests/adapters/test_torchrun_checkpoint.py
and test_ray_train.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.rank_states import write_state

torch = pytest.importorskip("torch")

from exactbatch.torch import certify_folder, load_checkpoint, save_checkpoint  # noqa: E402

X = np.arange(80.0).reshape(40, 2)  # 5 batches of 4 a rank at 2 ranks


def ranks(world=2, seed=3, elastic=False):
    return [
        DataLoader(X, 4, num_shards=world, shard_index=r, seed=seed, elastic=elastic)
        for r in range(world)
    ]


def run(folder, loaders, steps, start=0, its=None, **saved):
    """Step the ranks together ``steps`` times (across epochs) through their iterators
    ``its`` (None: new ones), saving every step; return the step and the iterators."""
    its = its or [iter(loader) for loader in loaders]
    for step in range(start + 1, start + steps + 1):
        for k, loader in enumerate(loaders):
            try:
                next(its[k])
            except StopIteration:
                its[k] = iter(loader)
                next(its[k])
        for loader in loaders:
            save_checkpoint(folder, step, loader=loader, **saved)
    return start + steps, its


def finish(folder, loaders, its, step):
    """Run the ranks' iterators ``its`` to the end of their epoch and save the run's end."""
    for loader, it in zip(loaders, its, strict=True):
        for _ in it:
            pass
        save_checkpoint(folder, step, loader=loader)


def test_a_run_killed_mid_save_resumes_from_the_last_complete_step_and_certifies(tmp_path):
    model, ckpt = torch.nn.Linear(2, 1), tmp_path / "ckpt"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = ranks()
    run(ckpt, first, 7, model=model, optimizer=opt)  # into epoch 1
    for loader in first:  # step 8: rank 1 dies before saving it
        next(iter(loader))
    save_checkpoint(ckpt, 8, loader=first[0], model=model, optimizer=opt)
    with torch.no_grad():
        model.weight.fill_(5.0)  # the model moved after the checkpoint: rolled back below
    again = ranks()
    assert [load_checkpoint(ckpt, loader=r, model=model, optimizer=opt) for r in again] == [7, 7]
    assert float(model.weight.detach().abs().max()) < 5.0
    assert not (ckpt / "step-000000008").exists()  # the killed run's step, removed by rank 0
    step, its = run(ckpt, again, 2, start=7)  # epoch 1's third and fourth steps
    assert (
        again[0].state_dict()["parent"]
        == json.loads((ckpt / "step-000000007" / "loader-0.json").read_text())["id"]
    )
    finish(ckpt, again, its, step)
    cert = certify_folder(ckpt)
    assert cert, str(cert)
    assert [(e.epoch, e.handed) for e in cert.epochs] == [(0, 40), (1, 40)]


def test_an_elastic_run_resumes_at_another_number_of_ranks(tmp_path):
    step, _ = run(tmp_path, ranks(elastic=True), 3)
    one = ranks(world=1, elastic=True)
    assert load_checkpoint(tmp_path, loader=one[0]) == step
    for _ in range(2):  # the rest of epoch 0: 10 global batches, 3 handed out
        for _ in iter(one[0]):
            pass
    save_checkpoint(tmp_path, step + 1, loader=one[0])
    assert certify_folder(tmp_path)


def test_no_checkpoint_is_a_fresh_start_and_nothing_to_certify(tmp_path):
    loader = ranks()[0]
    assert load_checkpoint(tmp_path / "none", loader=loader) is None
    assert load_checkpoint(tmp_path, loader=loader) is None
    for where in (tmp_path, tmp_path / "none"):
        with pytest.raises(ValueError, match=rf"{where}: no checkpoint"):
            certify_folder(where)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="file: a file"):
        certify_folder(tmp_path / "file")


def test_a_missing_rank_in_the_last_checkpoint_is_named(tmp_path):
    run(tmp_path, ranks(), 2)
    os.remove(tmp_path / "step-000000002" / "loader-1.json")
    with pytest.raises(ValueError, match=r"step-000000002: a checkpoint of 2 ranks .*loader-1"):
        certify_folder(tmp_path)
    loader = ranks()[1]
    assert load_checkpoint(tmp_path, loader=loader) == 1  # the incomplete step passed over


def test_a_checkpoint_of_another_run_is_named(tmp_path):
    run(tmp_path, ranks(), 1)
    run(tmp_path, ranks(seed=4), 1, start=1)
    with pytest.raises(
        ValueError,
        match=r"step-000000001.loader-0\.json: the state and .*step-000000002.loader-0\.json are ",
    ):
        certify_folder(tmp_path)
    with pytest.raises(ValueError, match=r"step-000000002.loader-0\.json: .*seed"):
        load_checkpoint(tmp_path, loader=ranks()[0])


def test_other_ranks_or_a_missing_model_or_a_broken_file_are_named(tmp_path):
    run(tmp_path, ranks(), 1)
    with pytest.raises(ValueError, match=r"step-000000001: a checkpoint of 2 ranks cannot resume"):
        load_checkpoint(tmp_path, loader=ranks(world=3)[2])
    with pytest.raises(ValueError, match=r"model\.pt: missing"):
        load_checkpoint(tmp_path, loader=ranks()[0], model=torch.nn.Linear(2, 1))
    (tmp_path / "step-000000001" / "loader-1.json").write_text("{")
    with pytest.raises(ValueError, match=r"loader-1\.json: not a loader state"):
        certify_folder(tmp_path)
    with pytest.raises(TypeError, match="save_checkpoint needs an exactbatch DataLoader"):
        save_checkpoint(tmp_path, 1, loader=X)


def test_rank_0_alone_saves_the_model_file_and_clears_states_beyond_its_world(tmp_path):
    here = tmp_path / "step-000000000"
    here.mkdir()
    for rank in (1, 2, 3):  # a killed run of 4 ranks
        (here / f"loader-{rank}.json").write_text("{}")
    zero, one = ranks()
    save_checkpoint(tmp_path, 0, loader=one, extra={"lr": 0.5})  # step 0 is a step
    assert not (here / "model.pt").exists() and (here / "loader-3.json").exists()
    save_checkpoint(tmp_path, 0, loader=zero, extra={"lr": 0.5})
    assert sorted(os.listdir(here)) == ["loader-0.json", "loader-1.json", "model.pt"]
    saved = torch.load(here / "model.pt")
    assert saved == {"step": 0, "model": None, "optimizer": None, "extra": {"lr": 0.5}}
    with pytest.raises(ValueError, match="no model state"):  # saved with extra alone
        load_checkpoint(tmp_path, loader=zero, model=torch.nn.Linear(2, 1))
    save_checkpoint(tmp_path, 1, loader=zero, model=torch.nn.Linear(2, 1))  # a model alone
    assert torch.load(tmp_path / "step-000000001" / "model.pt")["model"] is not None
    with pytest.raises(ValueError, match="^step must be >= 0; got step=-1$"):
        save_checkpoint(tmp_path, -1, loader=zero)
    with pytest.raises(TypeError, match="^load_checkpoint needs an exactbatch DataLoader"):
        load_checkpoint(tmp_path, loader=X)


def test_only_rank_0_removes_a_killed_runs_steps_and_the_users_files_stay(tmp_path):
    run(tmp_path, ranks(), 1)
    late = tmp_path / "step-000000002"
    late.mkdir()
    (late / "loader-0.json").write_text(json.dumps(ranks()[0].state_dict()))
    (tmp_path / "step-000000009").write_text("not a step")  # a file, and a folder of theirs
    (tmp_path / "logs").mkdir()
    assert load_checkpoint(tmp_path, loader=ranks()[1]) == 1
    assert (late / "loader-0.json").exists()  # rank 1 leaves it
    (late / "notes.txt").write_text("mine")
    assert load_checkpoint(tmp_path, loader=ranks()[0]) == 1
    assert os.listdir(late) == ["notes.txt"]
    assert (tmp_path / "logs").is_dir() and (tmp_path / "step-000000009").is_file()


# -- Ray Train: certify_run and restore_loader on checkpoints made here ---------------


@pytest.fixture(scope="module")
def train():
    return pytest.importorskip("ray.train")


def checkpoint(folder, loaders):
    os.makedirs(folder, exist_ok=True)
    for loader in loaders:
        write_state(os.fspath(folder), loader)
    return folder


def result(train, path, folders):
    found = [(train.Checkpoint.from_directory(os.fspath(f)), {}) for f in folders]
    return train.Result(
        metrics={}, checkpoint=None, error=None, path=os.fspath(path), best_checkpoints=found
    )


def test_ray_certify_run_follows_the_registered_checkpoints(train, tmp_path):
    from exactbatch.ray import certify_run, restore_loader

    first = ranks(elastic=True)
    for loader in first:
        next(iter(loader))
    a = checkpoint(tmp_path / "checkpoint_a", first)
    (one,) = ranks(world=1, elastic=True)
    assert restore_loader(one, train.Checkpoint.from_directory(os.fspath(a))) is not None
    for _ in range(2):
        for _ in iter(one):
            pass
    b = checkpoint(tmp_path / "checkpoint_b", [one])
    cert = certify_run(result(train, tmp_path, [a, b]))
    assert cert, str(cert)
    assert [(e.epoch, e.handed) for e in cert.epochs] == [(0, 40), (1, 40)]


def test_ray_bad_runs_are_named(train, tmp_path):
    from exactbatch.ray import certify_run, report_with_loader, restore_loader

    with pytest.raises(ValueError, match=r"nowhere: not the folder of a Ray Train run"):
        certify_run(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=rf"{tmp_path}: Ray Train registered no checkpoint"):
        certify_run(result(train, tmp_path, []))
    with pytest.raises(TypeError, match="certify_run needs a ray.train.Result"):
        certify_run(3)
    with pytest.raises(TypeError, match="report_with_loader needs an exactbatch DataLoader"):
        report_with_loader({}, X)
    half = checkpoint(tmp_path / "half", ranks()[:1])
    with pytest.raises(ValueError, match=r"half: a checkpoint of 2 ranks .*loader-1\.json missing"):
        certify_run(result(train, tmp_path, [half]))
    empty = checkpoint(tmp_path / "empty", [])
    with pytest.raises(ValueError, match=r"empty: no loader state"):
        certify_run(result(train, tmp_path, [empty]))
    with pytest.raises(ValueError, match=r"empty: no loader state"):
        restore_loader(ranks()[0], train.Checkpoint.from_directory(os.fspath(empty)))
    other = checkpoint(tmp_path / "other", ranks(seed=9))
    mine = checkpoint(tmp_path / "mine", ranks())
    with pytest.raises(ValueError, match=r"mine.loader-0\.json: the state and .*other"):
        certify_run(result(train, tmp_path, [mine, other]))
    with pytest.raises(ValueError, match=r"other.loader-0\.json: .*seed"):
        restore_loader(ranks()[0], train.Checkpoint.from_directory(os.fspath(other)))


# -- Ray Train: report_with_loader and restore_loader against a stand-in ray.train ----------


class FakeTrain:
    """What report_with_loader and restore_loader call of ``ray.train``: each report's
    metrics, options, and the files of its checkpoint's folder as they were then."""

    def __init__(self, world, restart_from=None):
        self.world, self.restart_from, self.reports = world, restart_from, []
        train = self

        class Checkpoint:
            def __init__(self, folder):
                self.folder = folder

            @classmethod
            def from_directory(cls, folder):
                return cls(folder)

        class Context:
            def get_world_size(self):
                return train.world

        self.Checkpoint, self.context = Checkpoint, Context()

    def get_context(self):
        return self.context

    def get_checkpoint(self):
        return self.restart_from

    def report(self, metrics, checkpoint=None, **options):
        folder = checkpoint.folder
        found = {n: open(os.path.join(folder, n)).read() for n in sorted(os.listdir(folder))}
        self.reports.append((metrics, folder, found, options))


@pytest.fixture
def fake_train(monkeypatch):
    def make(world, restart_from=None):
        fake = FakeTrain(world, restart_from)
        monkeypatch.setattr("exactbatch.adapters.ray_train._train", lambda: fake)
        return fake

    return make


@pytest.mark.parametrize("mode", [None, "SYNC", "ASYNC", "enum ASYNC"])
def test_ray_report_puts_the_workers_state_in_a_folder_of_its_own(fake_train, mode):
    from exactbatch.ray import report_with_loader

    train = fake_train(2)
    loader = ranks()[1]
    next(iter(loader))
    options = {} if mode is None else {"checkpoint_upload_mode": mode}
    if mode == "enum ASYNC":  # (ray.train.CheckpointUploadMode.ASYNC: its value is read)
        options = {"checkpoint_upload_mode": type("Mode", (), {"value": "ASYNC"})()}
    report_with_loader({"loss": 0.5}, loader, **options)
    ((metrics, folder, found, passed),) = train.reports
    assert metrics == {"loss": 0.5} and passed == options
    assert os.path.basename(folder).startswith("exactbatch-checkpoint-")
    assert list(found) == ["loader-1.json"]
    assert json.loads(found["loader-1.json"]) == json.loads(json.dumps(loader.state_dict()))
    # Ray copies the folder during the report (SYNC): removed after; ASYNC: Ray removes it
    assert os.path.isdir(folder) == (mode is not None and "ASYNC" in mode)
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)


def test_ray_report_adds_the_state_to_the_workers_checkpoint_folder(fake_train, tmp_path):
    from exactbatch.ray import report_with_loader

    train = fake_train(2)
    (tmp_path / "model.pt").write_text("weights")
    loader = ranks()[0]
    report_with_loader({}, loader, checkpoint_dir=tmp_path, checkpoint_upload_mode="NO_UPLOAD")
    ((_, folder, found, passed),) = train.reports
    assert folder == os.fspath(tmp_path) and passed == {"checkpoint_upload_mode": "NO_UPLOAD"}
    assert sorted(found) == ["loader-0.json", "model.pt"]
    assert sorted(os.listdir(tmp_path)) == ["loader-0.json", "model.pt"]  # the user's: kept


def test_ray_report_refusals_name_the_world_and_the_upload_mode(fake_train, tmp_path):
    from exactbatch.ray import report_with_loader

    train = fake_train(3)
    with pytest.raises(
        ValueError, match=r"report_with_loader: the loader has num_shards=2 in a job of 3 ranks"
    ):
        report_with_loader({}, ranks()[0])
    train.world = 2
    with pytest.raises(
        ValueError,
        match=r"report_with_loader: checkpoint_upload_mode=NO_UPLOAD reports a folder already "
        "in storage; give it as checkpoint_dir",
    ):
        report_with_loader({}, ranks()[0], checkpoint_upload_mode="NO_UPLOAD")
    assert train.reports == []


def test_ray_report_that_fails_still_removes_its_folder(fake_train, monkeypatch):
    from exactbatch.ray import report_with_loader

    train = fake_train(2)
    seen = []

    def fail(metrics, checkpoint=None, **options):
        seen.append(checkpoint.folder)
        raise RuntimeError("storage down")

    monkeypatch.setattr(train, "report", fail)
    with pytest.raises(RuntimeError, match="storage down"):
        report_with_loader({}, ranks()[0])
    assert len(seen) == 1 and not os.path.exists(seen[0])


def test_ray_restore_reads_the_checkpoint_ray_train_restarts_from(fake_train, train, tmp_path):
    from exactbatch.ray import restore_loader

    fake_train(2, restart_from=None)
    assert restore_loader(ranks()[0]) is None  # a fresh start
    first = ranks()
    its = [iter(loader) for loader in first]
    for it in its:
        next(it)
    folder = checkpoint(tmp_path / "c", first)
    saved = train.Checkpoint.from_directory(os.fspath(folder))
    fake_train(2, restart_from=saved)
    again = ranks()[1]
    assert restore_loader(again) is saved
    x, _ = next(iter(again))  # rank 1's second batch, as the first run's next
    np.testing.assert_array_equal(x, next(its[1])[0])


def test_ray_helpers_without_ray_train_say_how_to_install_it(monkeypatch):
    import sys

    from exactbatch.ray import certify_run

    monkeypatch.setitem(sys.modules, "ray.train", None)  # (an import of it fails)
    with pytest.raises(
        ImportError, match=r"^exactbatch\.ray needs Ray Train: pip install 'exactbatch\[ray\]'$"
    ):
        certify_run("anywhere")


def test_ray_checkpoints_are_named_by_their_filesystem_and_path(train, tmp_path):
    """A local checkpoint is named by its path; another filesystem's as type://path."""
    import types

    import pyarrow.fs

    from exactbatch.ray import certify_run, restore_loader

    with pytest.raises(TypeError, match="restore_loader needs an exactbatch DataLoader"):
        restore_loader(X, None)
    half = checkpoint(tmp_path / "half", ranks()[:1])
    with pytest.raises(ValueError, match=rf"^{half}: a checkpoint of 2 ranks"):
        certify_run(result(train, tmp_path, [half]))
    sub = pyarrow.fs.SubTreeFileSystem(os.fspath(tmp_path), pyarrow.fs.LocalFileSystem())
    elsewhere = types.SimpleNamespace(filesystem=sub, path="half")
    with pytest.raises(ValueError, match=r"^subtree://half: a checkpoint of 2 ranks"):
        restore_loader(ranks()[0], elsewhere)
    gone = types.SimpleNamespace(filesystem=sub, path="gone")
    with pytest.raises(ValueError, match=r"^subtree://gone: cannot list the checkpoint \("):
        restore_loader(ranks()[0], gone)


def test_ray_certify_run_reads_a_runs_folder_through_its_filesystem(fake_train, tmp_path):
    import types

    fake = fake_train(2)
    folder = checkpoint(tmp_path / "c", ranks())
    asked = []

    def from_path(path, storage_filesystem=None):
        asked.append((path, storage_filesystem))
        if path == "nowhere":
            raise RuntimeError("no such run")
        found = [(types.SimpleNamespace(filesystem=fs, path=os.fspath(folder)), {})]
        return types.SimpleNamespace(path=path, best_checkpoints=found)

    import pyarrow.fs

    from exactbatch.ray import certify_run

    fs = pyarrow.fs.LocalFileSystem()
    fake.Result = types.SimpleNamespace(from_path=from_path)
    cert = certify_run("the-run", storage_filesystem=fs)
    assert asked == [("the-run", fs)]
    assert type(cert).__name__ == "Certificate"
    with pytest.raises(ValueError, match=r"^nowhere: not the folder of a Ray Train run \(no such"):
        certify_run("nowhere")
    with pytest.raises(
        TypeError,
        match=r"certify_run needs a ray.train.Result or a run's folder; "
        "got int$",
    ):
        certify_run(3)
    empty = types.SimpleNamespace(path="p", best_checkpoints=None)
    with pytest.raises(
        ValueError,
        match=r"^p: Ray Train registered no checkpoint in this run \(report the loader with "
        r"exactbatch\.ray\.report_with_loader\)$",
    ):
        certify_run(empty)


def test_ray_report_whose_folder_ray_already_took_succeeds(fake_train, monkeypatch):
    """The clean-up of report_with_loader's own folder ignores a folder gone already."""
    import shutil

    from exactbatch.ray import report_with_loader

    train = fake_train(2)
    taken = []

    def take(metrics, checkpoint=None, **options):
        shutil.rmtree(checkpoint.folder)
        taken.append(checkpoint.folder)

    monkeypatch.setattr(train, "report", take)
    report_with_loader({}, ranks()[0])
    assert len(taken) == 1 and not os.path.exists(taken[0])
