-- How many commits each session made on its agent's branch (HEAD before..after).
ALTER TABLE sessions ADD COLUMN commits INTEGER NOT NULL DEFAULT 0;
