-- Race registrations: the demo data set (`tablesql demo`). Each registration
-- is a base row under BIB: and a denormalized index row under AGE: in the
-- partition of its event and distance.
CREATE TABLE registrations (
    event TEXT NOT NULL,
    distance TEXT NOT NULL,
    bib INT NOT NULL,
    name TEXT NOT NULL,
    gender TEXT NOT NULL,
    age INT NOT NULL,
    finish BIGINT,
    registered TIMESTAMP,
    club TEXT,
    PRIMARY KEY (event, distance, bib)
) WITH (
    storage_table = 'Registrations',
    partition_key = '{event}__{distance}',
    row_key = 'BIB:{bib:05}__{name}__{gender}__{age}',
    index_age = 'AGE:{age:03}__{bib}__{name}__{gender}'
);
