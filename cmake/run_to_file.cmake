# cmake -DPROGRAM=... -DARGS="a;b" -DOUTPUT=... -P run_to_file.cmake: PROGRAM's stdout to OUTPUT.
execute_process(COMMAND "${PROGRAM}" ${ARGS} OUTPUT_FILE "${OUTPUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUTPUT}")
  message(FATAL_ERROR "${PROGRAM} ${ARGS} failed: ${rc}")
endif()
