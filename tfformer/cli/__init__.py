"""The console scripts: each parses its arguments, sets up logging, calls the library and exits.

tfformer-train (`train`), tfformer-average (`average`), tfformer-export (`export`),
tfformer-serve (`serve`), tfformer-translate (`translate`); `demo` is `make demo`.
"""
