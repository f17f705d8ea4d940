# cmake -DSOURCE_DIR=... -DOUTPUT=... -DMPSD_VERSION=... -DMPSD_TORCH_VERSION=...
#       [-DMPSD_GIT_COMMIT=...] -P write_version.cmake
# Writes OUTPUT from version.cc.in, touching it only when its text changes, so that a new commit
# recompiles one file and an unchanged tree recompiles none.
if(NOT MPSD_GIT_COMMIT)
  find_program(_git git)
  if(_git)
    execute_process(COMMAND "${_git}" -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
      OUTPUT_VARIABLE MPSD_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _rc ERROR_QUIET)
    if(NOT _rc EQUAL 0)
      set(MPSD_GIT_COMMIT "")
    endif()
  endif()
endif()
if(NOT MPSD_GIT_COMMIT)
  set(MPSD_GIT_COMMIT "unknown")
endif()
configure_file("${CMAKE_CURRENT_LIST_DIR}/version.cc.in" "${OUTPUT}" @ONLY)
