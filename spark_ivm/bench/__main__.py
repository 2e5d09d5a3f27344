"""`python -m spark_ivm.bench` (what `./build.sh bench` runs): the benchmark of `spark_ivm.bench.run`."""

import sys

from spark_ivm.bench.run import main

sys.exit(main())
