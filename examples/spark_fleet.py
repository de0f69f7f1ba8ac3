#!/usr/bin/env python3
"""Memory of a fleet, from the snapshots of many machines in one directory.

Each machine's snapshot was exported with

    pagescope export SNAPSHOT --format parquet --partition -o DIR

which writes DIR/TABLE/host=NAME/snapshot-TIME.parquet. Spark reads each
table's directory as one dataset, with `host` from the directory names.
This prints, per host and snapshot (boot, time taken), the processes, the
sum of their RSS and PSS, and the distinct page frames they map (what
`pagescope report total` calls user_pages), in pages, as JSON lines.

    python3 examples/spark_fleet.py DIR

Needs PySpark (pip install pyspark) and Java 17 or later; runs Spark in
local mode.
"""

import json
import sys

from pyspark.sql import SparkSession

QUERY = """
SELECT host,
       boot_id,
       CAST(taken_at AS STRING) AS taken_at,
       COUNT(DISTINCT pid) AS processes,
       SUM(CASE WHEN resident THEN 1 ELSE 0 END) AS rss_pages,
       ROUND(SUM(CASE WHEN resident AND map_count IS NOT NULL
                      THEN 1.0 / CAST(GREATEST(map_count, 1) AS DOUBLE)
                      ELSE 0 END), 4) AS pss_pages,
       COUNT(DISTINCT CASE WHEN resident AND kpageflags IS NOT NULL THEN pfn END)
           AS user_pages
FROM pages
GROUP BY host, boot_id, taken_at
ORDER BY host, taken_at
"""


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: spark_fleet.py DIR")
    root = sys.argv[1]
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("pagescope-fleet")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Local mode talks to itself only.
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        # Host names are names, even those that look like numbers.
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.read.parquet(f"{root}/pages").createOrReplaceTempView("pages")
        for row in spark.sql(QUERY).collect():
            d = row.asDict()
            # Counts as integers, PSS as a number (Spark may give them as
            # decimals: it reads Parquet's unsigned 64-bit integers so).
            for k in ("processes", "rss_pages", "user_pages"):
                d[k] = int(d[k])
            d["pss_pages"] = float(d["pss_pages"])
            print(json.dumps(d))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
