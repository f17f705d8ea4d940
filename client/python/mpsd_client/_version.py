# Written by client/python/generate_stubs.py from CMakeLists.txt's project(mpsd VERSION).
__version__ = "0.1.0"
