"""Where kernels run: the Device protocol, opening one (auto, hip, emulator), hip-python's device,
and what a device reports about itself."""
