# tgl_embed_text.cmake — a text file as a C string literal, so a program can
# carry a file's exact text without a copy kept by hand.
#
# Run at build time as a script:
#   cmake -DTEXT_FILE=<text file> -DHEADER=<generated header> -DMACRO=<name>
#         [-DSHOWN=<how the comment names TEXT_FILE>] -P tgl_embed_text.cmake
#
# HEADER defines MACRO as a string literal equal to TEXT_FILE byte for
# byte.  Bytes outside ASCII pass through unchanged (the compilers read and
# write UTF-8); backslash, double quote, '?' (no trigraphs), tab and CR are
# escaped.
cmake_minimum_required(VERSION 3.20)

foreach(v TEXT_FILE HEADER MACRO)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "tgl_embed_text.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT DEFINED SHOWN)
  set(SHOWN "${TEXT_FILE}")
endif()

file(READ "${TEXT_FILE}" text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "?" "\\?" text "${text}")
string(REPLACE "\t" "\\t" text "${text}")
string(REPLACE "\r" "\\r" text "${text}")
# One source line per line of the file: "...\n" followed by a continuation.
string(REPLACE "\n" "\\n\" \\\n    \"" text "${text}")

set(out "/* Generated at build time by cmake/tgl_embed_text.cmake from ${SHOWN};
 * do not edit.  ${MACRO} is that file's text. */
#define ${MACRO} \\
    \"${text}\"
")
file(WRITE "${HEADER}" "${out}")
