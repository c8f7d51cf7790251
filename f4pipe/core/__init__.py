"""What every layer stands on: the error types (bad input or environment, exit 2), atomic writes
and bounded reads, the names the workflow and the code share, the Parquet schemas, the number
codecs (fp4, e8m0, bf16) host and emulator both read, and the Device protocol."""
