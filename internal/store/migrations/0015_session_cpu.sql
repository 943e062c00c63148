-- What a session's whole process tree cost in CPU time, from its cgroup
-- (cpu.stat): NULL where swarmd ran it without a cgroup of its own.
ALTER TABLE sessions ADD COLUMN cpu_ms INTEGER;
