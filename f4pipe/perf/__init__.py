"""Predicted throughput without an MI355X: a cycle model of the f4gemm kernels.

trace.py records the path one workgroup executes on the emulator; cu.py replays it on a model
of one CU (issue, MFMA pipes, LDS, vector memory, counters, barriers); model.py turns a
workgroup's cycles into a launch's time (rounds over 256 CUs, memory traffic, launch overhead,
sustained clock); costs.py is the one table of latencies and throughputs and the calibrated
constants; predict.py answers shapes; fit.py fits the constants and measures the accuracy on
aiter's recorded MI355X timings. Every number it produces is a prediction and says so.
"""
