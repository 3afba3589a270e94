# Runs the repository lint checks that need no build (CTest test "lint", label "lint"):
# no_external_citations.sh fails when a file names a markdown document that is not in the
# repository (e.g. a design note kept outside it); layering.py when an #include breaks the
# dependency rule of docs/architecture.md 2.2.
foreach(check IN ITEMS "bash;no_external_citations.sh" "python3;layering.py")
  list(GET check 0 interpreter)
  list(GET check 1 script)
  execute_process(COMMAND ${interpreter} ${CMAKE_CURRENT_LIST_DIR}/${script} ${MIXP_SOURCE_DIR}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tests/lint/${script} failed (exit ${rc})")
  endif()
endforeach()
