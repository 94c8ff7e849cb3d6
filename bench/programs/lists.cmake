# bench/programs/lists.cmake: a CMake script run by `cmake -P` (bench/programs/measure.py):
# 20,000 hashed keys appended to one list, which grows to 277 KB, a copy at each append;
# sorted, and its digits replaced by a regular expression.
set(acc "")
foreach(i RANGE 1 20000)
  math(EXPR sq "${i} * ${i} % 9973")
  string(MD5 h "k${i}")
  string(SUBSTRING "${h}" 0 8 h)
  list(APPEND acc "${h}:${sq}")
endforeach()
list(SORT acc)
list(LENGTH acc n)
string(REGEX REPLACE "[0-9]" "x" masked "${acc}")
string(LENGTH "${masked}" len)
list(GET acc 0 first)
message("${n} ${len} ${first}")
