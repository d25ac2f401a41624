"""A table this process committed to is known whole without a second listing only by induction
(no JVM): it created the table, or it had found the version before whole."""

from __future__ import annotations

from intent_spark.lake import integrity


def test_an_own_commit_is_whole_only_on_a_table_created_or_found_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(integrity, "_whole", set())
    table = tmp_path / "targets"
    root = str(table.resolve())

    integrity.note_own_commit(str(table), 3)  # version 2 never checked: other writers' files unknown
    assert integrity._whole == set()

    integrity.note_own_commit(str(table), 0)  # created here: every file in the log is ours
    integrity.note_own_commit(str(table), 1)
    assert integrity._whole == {(root, 0), (root, 1)}

    integrity._whole.add((root, 6))  # version 6 read and found whole
    integrity.note_own_commit(str(table), 7)
    integrity.note_own_commit(str(table), 9)  # version 8 is another writer's, unchecked
    assert integrity._whole == {(root, 0), (root, 1), (root, 6), (root, 7)}
