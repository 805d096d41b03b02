-- A state store as llmao-server 0.1.0 left it: no schema version, the tables of that release.
-- Written by that release's own store code (server/llmao_server/store/ at the commit that
-- released 0.1.0), then dumped. SQLite and PostgreSQL both run it as it is.
BEGIN TRANSACTION;
CREATE TABLE admin_attempts (
        scope TEXT PRIMARY KEY,
        window_start DOUBLE PRECISION NOT NULL,
        attempts BIGINT NOT NULL);
INSERT INTO "admin_attempts" VALUES('peer:127.0.0.1',1767225640.0,1);
CREATE TABLE applied_reports (
        box TEXT PRIMARY KEY,
        revision TEXT NOT NULL,
        applied_at TEXT NOT NULL,
        servers TEXT NOT NULL,
        reported_at DOUBLE PRECISION NOT NULL);
INSERT INTO "applied_reports" VALUES('203.0.113.10','rev-0123456789ab','2026-01-01T00:00:00Z','[["gemma", 8001, "gemma"]]',1767225601.0);
CREATE TABLE approvals (
        box TEXT PRIMARY KEY,
        models TEXT NOT NULL,
        approved_by TEXT NOT NULL,
        approved_at DOUBLE PRECISION NOT NULL);
INSERT INTO "approvals" VALUES('192.0.2.51','["qwen"]','admin',1767225620.0);
CREATE TABLE box_fetches (
        box TEXT PRIMARY KEY,
        fetched_at DOUBLE PRECISION NOT NULL);
INSERT INTO "box_fetches" VALUES('203.0.113.10',1767225600.5);
INSERT INTO "box_fetches" VALUES('203.0.113.11',1767225610.25);
CREATE TABLE reconcile_pass (
        slot INTEGER PRIMARY KEY,
        pass_at DOUBLE PRECISION NOT NULL,
        recorded_at DOUBLE PRECISION NOT NULL,
        verdicts TEXT NOT NULL,
        drift TEXT NOT NULL);
INSERT INTO "reconcile_pass" VALUES(1,1767225630.0,1767225631.0,'{"llmao:203.0.113.10:8001:gemma": {"state": "Healthy"}}','[{"kind": "orphan", "deployment": "llmao:198.51.100.9:8001:gemma"}]');
CREATE TABLE unknown_boxes (
        name TEXT PRIMARY KEY,
        first_seen DOUBLE PRECISION NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL,
        seen_count BIGINT NOT NULL);
INSERT INTO "unknown_boxes" VALUES('192.0.2.50',1767225500.0,1767225590.0,3);
CREATE INDEX unknown_boxes_by_last_seen ON unknown_boxes (last_seen);
COMMIT;
