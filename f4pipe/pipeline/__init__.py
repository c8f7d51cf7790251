"""The pipeline's spine: stages, typed result sets and their Parquet schemas, the result store,
archives, the result-set layout and the facts the workflow records."""
