"""The result-projector keeps the search index: a snapshot is findable by its readable text as soon
as the htmltotext result is projected, by its title once the title result is, by new tags after
``events.tags.changed``; ``reindex`` rebuilds it from rows and files."""

from __future__ import annotations

from pathlib import Path

from boxcar.crawl_runner import queries as q
from boxcar.ingest.access import operator
from boxcar.ingest.library import SnapshotLibrary
from boxcar.result_projector import fulltext
from boxcar.result_projector.projector import ResultProjector
from boxcar.shared import bus, search
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.clock import utcnow
from boxcar.shared.db.models import STARTED, Crawl, Snapshot
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    ArchiveResultRecord,
    OutputFile,
    Seed,
    TagsChanged,
    encode,
)
from boxcar.shared.settings import Settings

ME = operator("system")


def _result(snapshot_id: str, plugin: str, files: dict[str, int], output_str: str = "") -> tuple[str, bytes]:
    record = ArchiveResultRecord(
        id=new_id(),
        snapshot_id=snapshot_id,
        plugin=plugin,
        hook_name=f"on_Snapshot__{plugin}",
        status="succeeded",
        output_str=output_str,
        output_files={rel: OutputFile(size=size, mimetype="text/plain") for rel, size in files.items()},
        start_ts=utcnow(),
        end_ts=utcnow(),
    )
    return bus.SUBJECT_ARCHIVERESULT, encode(record)


def test_results_tags_and_reindex_keep_the_index(db, tmp_path: Path):
    settings = Settings(data_dir=tmp_path / "data")
    now = utcnow()
    crawl = Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x")
    with db.write() as s:
        s.add(crawl)
        s.flush()
        sid = q.insert_snapshots(
            s, crawl, [Seed.parse("https://birds.example/wrens")], depth=0, parent_id=None, now=now
        )[0][0]
        snap_dir = settings.data_dir / s.get(Snapshot, sid).output_dir
    (snap_dir / "htmltotext").mkdir(parents=True)
    (snap_dir / "htmltotext" / "htmltotext.txt").write_text("Winter wrens sing from the bramble thicket at dusk.")
    projector = ResultProjector(settings, db)
    library = SnapshotLibrary(db, settings.data_dir)

    projector.apply([_result(sid, "htmltotext", {"htmltotext.txt": 52})])
    assert [r.id for r in library.search("bramble thicket", viewer=ME)] == [sid]
    assert library.search("bramble thicket", viewer=ME)[0].domain == "birds.example"  # filled by the projector

    projector.apply([_result(sid, "title", {}, "Wren song")])
    assert [r.id for r in library.search("wren song", viewer=ME)] == [sid]

    assert library.set_tags(sid, ["ornithology"], viewer=ME) == ["ornithology"]
    assert library.search("ornithology", viewer=ME) == []  # not yet: the projector owns the index
    projector.apply([(bus.SUBJECT_TAGS_CHANGED, encode(TagsChanged(snapshot_ids=[sid])))])
    assert [r.id for r in library.search("ornithology", viewer=ME)] == [sid]

    with db.write() as s:
        search.remove_documents(s, [sid])
    assert library.search("bramble", viewer=ME) == []
    assert fulltext.reindex(db, ArchiveStore.local(settings.data_dir)) == 1
    assert [r.id for r in library.search("bramble", viewer=ME)] == [sid]
