"""The peer of benches/azure.rs: the official Python SDK (azure-data-tables)
doing the same work against the same Azurite, so that the two clients are
compared side by side. Run by scripts/bench-azure with the venv of
scripts/python-env.

20,000 entities of 4 properties in 20 partitions; EGTs of 100 with 8 in
flight (threads: the SDK's sync client is the common one); then a full scan
page by page (1,000 per page).
"""
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from azure.data.tables import EdmType, EntityProperty, TableServiceClient

ENTITIES = 20_000
IN_FLIGHT = 8
ROUNDS = 3


def entity(i):
    return {
        "PartitionKey": f"p{i // 1000:02}",
        "RowKey": f"{i:08}",
        "Name": f"runner {i}",
        "Age": i % 80,
        "Bib": EntityProperty(i, EdmType.INT64),
        "Paid": i % 2 == 0,
    }


def main():
    service = TableServiceClient.from_connection_string("UseDevelopmentStorage=true")
    print(f"python sdk: {ENTITIES} entities, {IN_FLIGHT} requests in flight, {ROUNDS} rounds")
    for rnd in range(1, ROUNDS + 1):
        service.delete_table("BenchSdk")
        table = service.create_table("BenchSdk")
        batches = [
            [("create", entity(i)) for i in range(start, start + 100)]
            for start in range(0, ENTITIES, 100)
        ]
        started = time.perf_counter()
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            list(pool.map(table.submit_transaction, batches))
        egt = time.perf_counter() - started

        started = time.perf_counter()
        pages = seen = 0
        for page in table.list_entities(results_per_page=1000).by_page():
            pages += 1
            seen += sum(1 for _ in page)
        scan = time.perf_counter() - started
        assert seen == ENTITIES, seen
        print(
            f"round {rnd}: EGT load {ENTITIES / egt:.0f} entities/s ({egt:.2f}s); "
            f"full scan {pages} pages in {scan * 1000:.0f}ms = {pages / scan:.1f} pages/s, "
            f"{seen / scan:.0f} entities/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
