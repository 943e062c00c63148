-- The backend's final result text (an excerpt, at most 2 KiB) for each session.
ALTER TABLE sessions ADD COLUMN result_text TEXT NOT NULL DEFAULT '';
