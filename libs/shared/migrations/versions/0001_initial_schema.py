"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 01:59:32.044803
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "binary",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("machine", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("abspath", sa.String(length=1024), nullable=False),
        sa.Column("version", sa.String(length=128), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("binprovider", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_binary")),
        sa.UniqueConstraint(
            "machine",
            "name",
            "abspath",
            "version",
            "sha256",
            name=op.f("uq_binary_machine_name_abspath_version_sha256"),
        ),
    )
    op.create_table(
        "crawl_schedule",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("schedule", sa.String(length=64), nullable=False),
        sa.Column("label", sa.String(length=256), nullable=False),
        sa.Column("is_enabled", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("template", sa.JSON(), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crawl_schedule")),
    )
    with op.batch_alter_table("crawl_schedule", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_crawl_schedule_retry_at"), ["retry_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_crawl_schedule_status"), ["status"], unique=False)

    op.create_table(
        "process",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("machine", sa.String(length=255), nullable=False),
        sa.Column("snapshot_id", sa.String(length=32), nullable=True),
        sa.Column("plugin", sa.String(length=64), nullable=False),
        sa.Column("hook_name", sa.String(length=255), nullable=False),
        sa.Column("cmd", sa.JSON(), nullable=False),
        sa.Column("pwd", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("stdout", sa.Text(), nullable=False),
        sa.Column("stderr", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("timeout", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_process")),
    )
    with op.batch_alter_table("process", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_process_snapshot_id"), ["snapshot_id"], unique=False)

    op.create_table(
        "tag",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tag")),
        sa.UniqueConstraint("name", name=op.f("uq_tag_name")),
    )
    op.create_table(
        "crawl",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("seeds", sa.JSON(), nullable=False),
        sa.Column("max_depth", sa.Integer(), nullable=False),
        sa.Column("tags_str", sa.String(length=1024), nullable=False),
        sa.Column("plugins", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("label", sa.String(length=256), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("output_dir", sa.String(length=512), nullable=False),
        sa.Column("source_file", sa.String(length=512), nullable=True),
        sa.Column("schedule_id", sa.String(length=32), nullable=True),
        sa.Column("trace_context", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["crawl_schedule.id"],
            name=op.f("fk_crawl_schedule_id_crawl_schedule"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crawl")),
    )
    with op.batch_alter_table("crawl", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_crawl_retry_at"), ["retry_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_crawl_status"), ["status"], unique=False)

    op.create_table(
        "snapshot",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("crawl_id", sa.String(length=32), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("url_hash", sa.String(length=64), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("parent_snapshot_id", sa.String(length=32), nullable=True),
        sa.Column("title", sa.String(length=512), nullable=True),
        sa.Column("bookmarked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("downloaded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("output_dir", sa.String(length=512), nullable=False),
        sa.Column("output_size", sa.BigInteger(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["crawl_id"], ["crawl.id"], name=op.f("fk_snapshot_crawl_id_crawl"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["parent_snapshot_id"],
            ["snapshot.id"],
            name=op.f("fk_snapshot_parent_snapshot_id_snapshot"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_snapshot")),
        sa.UniqueConstraint("crawl_id", "url_hash", name=op.f("uq_snapshot_crawl_id_url_hash")),
    )
    with op.batch_alter_table("snapshot", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_snapshot_bookmarked_at"), ["bookmarked_at"], unique=False)
        batch_op.create_index("ix_snapshot_crawl_id_status", ["crawl_id", "status"], unique=False)
        batch_op.create_index("ix_snapshot_status_retry_at", ["status", "retry_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_snapshot_url_hash"), ["url_hash"], unique=False)

    op.create_table(
        "archiveresult",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("snapshot_id", sa.String(length=32), nullable=False),
        sa.Column("plugin", sa.String(length=64), nullable=False),
        sa.Column("hook_name", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("output_str", sa.Text(), nullable=False),
        sa.Column("output_json", sa.JSON(), nullable=True),
        sa.Column("output_files", sa.JSON(), nullable=False),
        sa.Column("output_size", sa.BigInteger(), nullable=False),
        sa.Column("output_mimetypes", sa.String(length=512), nullable=False),
        sa.Column("start_ts", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_ts", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("process_id", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_id"], ["snapshot.id"], name=op.f("fk_archiveresult_snapshot_id_snapshot"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_archiveresult")),
        sa.UniqueConstraint(
            "snapshot_id", "plugin", "hook_name", name=op.f("uq_archiveresult_snapshot_id_plugin_hook_name")
        ),
    )
    with op.batch_alter_table("archiveresult", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_archiveresult_plugin"), ["plugin"], unique=False)
        batch_op.create_index(batch_op.f("ix_archiveresult_process_id"), ["process_id"], unique=False)
        batch_op.create_index("ix_archiveresult_snapshot_id_status", ["snapshot_id", "status"], unique=False)

    op.create_table(
        "snapshot_tag",
        sa.Column("snapshot_id", sa.String(length=32), nullable=False),
        sa.Column("tag_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_id"], ["snapshot.id"], name=op.f("fk_snapshot_tag_snapshot_id_snapshot"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["tag_id"], ["tag.id"], name=op.f("fk_snapshot_tag_tag_id_tag"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("snapshot_id", "tag_id", name=op.f("pk_snapshot_tag")),
    )
    op.create_table(
        "snapshot_task",
        sa.Column("id", sa.String(length=80), nullable=False),
        sa.Column("snapshot_id", sa.String(length=32), nullable=False),
        sa.Column("crawl_id", sa.String(length=32), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("plugins", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("results", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_id"], ["snapshot.id"], name=op.f("fk_snapshot_task_snapshot_id_snapshot"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_snapshot_task")),
    )
    with op.batch_alter_table("snapshot_task", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_snapshot_task_crawl_id"), ["crawl_id"], unique=False)
        batch_op.create_index("ix_snapshot_task_snapshot_id_stage", ["snapshot_id", "stage"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("snapshot_task", schema=None) as batch_op:
        batch_op.drop_index("ix_snapshot_task_snapshot_id_stage")
        batch_op.drop_index(batch_op.f("ix_snapshot_task_crawl_id"))

    op.drop_table("snapshot_task")
    op.drop_table("snapshot_tag")
    with op.batch_alter_table("archiveresult", schema=None) as batch_op:
        batch_op.drop_index("ix_archiveresult_snapshot_id_status")
        batch_op.drop_index(batch_op.f("ix_archiveresult_process_id"))
        batch_op.drop_index(batch_op.f("ix_archiveresult_plugin"))

    op.drop_table("archiveresult")
    with op.batch_alter_table("snapshot", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_snapshot_url_hash"))
        batch_op.drop_index("ix_snapshot_status_retry_at")
        batch_op.drop_index("ix_snapshot_crawl_id_status")
        batch_op.drop_index(batch_op.f("ix_snapshot_bookmarked_at"))

    op.drop_table("snapshot")
    with op.batch_alter_table("crawl", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_crawl_status"))
        batch_op.drop_index(batch_op.f("ix_crawl_retry_at"))

    op.drop_table("crawl")
    op.drop_table("tag")
    with op.batch_alter_table("process", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_process_snapshot_id"))

    op.drop_table("process")
    with op.batch_alter_table("crawl_schedule", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_crawl_schedule_status"))
        batch_op.drop_index(batch_op.f("ix_crawl_schedule_retry_at"))

    op.drop_table("crawl_schedule")
    op.drop_table("binary")
