import pyarrow.parquet as pq

from tessera.planner.twin import sweep


def test_sweep_is_resumable_and_columnar(tmp_path):
    # light configurations only: keep the test fast
    cids = [c for c in range(200) if sweep.draw_config(c).n_adapters <= 32 and sweep.draw_config(c).total_rate < 10][:4]
    sweep.run_sweep(tmp_path, 0, workers=1, chunk=1, ids=cids[:2])
    assert len(list(tmp_path.glob("part-*.parquet"))) == 2
    sweep.run_sweep(tmp_path, 0, workers=1, chunk=1, ids=cids)  # resumes: only the 2 missing ones run
    assert len(list(tmp_path.glob("part-*.parquet"))) == 4
    n = sweep.merge(tmp_path, tmp_path / "all.parquet")
    t = pq.read_table(tmp_path / "all.parquet")
    assert n == 4 and t.column_names == sweep.COLUMNS
    assert sorted(t.column("cid").to_pylist()) == sorted(cids)
