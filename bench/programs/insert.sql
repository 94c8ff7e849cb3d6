-- SQLite: 200,000 rows of 16-215 byte strings inserted into a database in memory with an
-- index, then a range count and a grouping (bench/run_programs.sh; the page size, 4 KiB
-- by default, is set before it by the script for its 8 KiB variant).
create table t(a integer, b text, c real);
create index ta on t(b);
with recursive r(i) as (select 1 union all select i + 1 from r where i < 200000)
insert into t select i, substr(hex(zeroblob(16 + i % 200)) || (i * 2654435761 % 1000003), 1 + i % 7), i * 0.5 from r;
select count(*), sum(length(b)) from t where b > 'A';
select a % 100, count(*), max(c) from t group by a % 100 order by 2 desc limit 3;
