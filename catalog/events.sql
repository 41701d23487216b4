-- The events of the demo data set, one row per event and distance
-- (`tablesql demo`): joined with registrations on (event, distance).
CREATE TABLE events (
    event TEXT NOT NULL,
    distance TEXT NOT NULL,
    city TEXT NOT NULL,
    km DOUBLE NOT NULL,
    cutoff_minutes INT
) WITH (
    storage_table = 'Events',
    partition_key = '{event}',
    row_key = '{distance}'
);
