# Runs the repository lint checks that need no build (CTest test "lint", label "lint"):
# no_external_citations.sh fails when a file names a markdown document that is not in the
# repository (e.g. a design note kept outside it); layering.py when an #include breaks the
# dependency rule of docs/architecture.md 2.2.
execute_process(
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/no_external_citations.sh ${MIXP_SOURCE_DIR}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tests/lint/no_external_citations.sh failed (exit ${rc})")
endif()
execute_process(
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/layering.py ${MIXP_SOURCE_DIR}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tests/lint/layering.py failed (exit ${rc})")
endif()
