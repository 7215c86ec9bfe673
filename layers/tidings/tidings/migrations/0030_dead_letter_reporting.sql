-- The scheduled dead-letter report claims what it reports, so that every dead letter is
-- reported once whatever the timing of the runs and of the commits that made the dead letters.

-- When the scheduled report claimed this dead letter; NULL until then, and NULL again whenever
-- the row leaves dead_letter or becomes a dead letter anew (so a row that dies again is reported
-- again). Nullable without a default: adding it changes the catalog only, the table is not
-- rewritten. Rows that were dead letters before this migration are unreported, so the first
-- runs report them once more, oldest first (at most dead_letter_report_max_rows per run):
-- a one-time repeat rather than a gap for those dead-lettered since the last report.
ALTER TABLE tidings.messages ADD COLUMN dead_letter_reported_at timestamptz;

-- The report's claim: the unreported dead letters, oldest first. Holds only those, so it stays
-- small, and rows enter it only as they become dead letters.
CREATE INDEX messages_unreported_dead_letters ON tidings.messages (dead_lettered_at, id)
    WHERE status = 'dead_letter' AND dead_letter_reported_at IS NULL;
