"""An application's first hour against `tablesql serve`, as a new user would
write it: SQLAlchemy 2's ORM over tables it creates itself, an Alembic
migration, pandas' to_sql and read_sql, psycopg's executemany.

Run as `python sqlalchemy_orm.py PORT USER DATABASE`. Each step runs in
turn; the first failure is printed with its step's name and stops the run.
Prints one JSON document of what each step saw; tests/it/clients.rs checks
it. No option, no monkeypatch: a plain URL.
"""
import json
import sys
import traceback

import pandas
import psycopg
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import ForeignKey, String, create_engine, inspect, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class Author(Base):
    __tablename__ = "authors"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(50))
    born: Mapped[int | None]
    books: Mapped[list["Book"]] = relationship(back_populates="author")


class Book(Base):
    __tablename__ = "books"
    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(String(100))
    year: Mapped[int | None]
    author_id: Mapped[int] = mapped_column(ForeignKey("authors.id"))
    author: Mapped[Author] = relationship(back_populates="books")


def main():
    port, user, database = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    url = f"postgresql+psycopg://{user}@127.0.0.1:{port}/{database}"
    engine = create_engine(url)
    out = {"steps": []}

    def step(name, f):
        try:
            out[name] = f()
            out["steps"].append(name)
            return True
        except Exception as e:  # the report names the step and the error
            out["failed"] = {"step": name, "error": f"{type(e).__name__}: {e}",
                             "trace": traceback.format_exc()[-2000:]}
            return False

    def create_all():
        Base.metadata.create_all(engine)
        return sorted(inspect(engine).get_table_names())

    def add_all():
        with Session(engine) as s:
            ann = Author(name="Ann", born=1950)
            bo = Author(name="Bo", born=None)
            s.add_all([
                ann, bo,
                Book(title="First", year=1980, author=ann),
                Book(title="Second", year=1990, author=ann),
                Book(title="Third", year=2001, author=bo),
            ])
            s.commit()
            return {"authors": [ann.id, bo.id],
                    "books": sorted(b.id for b in ann.books + bo.books)}

    def query():
        with Session(engine) as s:
            rows = s.scalars(
                select(Book).where(Book.year >= 1985).order_by(Book.year.desc())
            ).all()
            return [[b.title, b.year] for b in rows]

    def join():
        with Session(engine) as s:
            rows = s.execute(
                select(Author.name, Book.title)
                .join(Author.books)
                .order_by(Author.name, Book.title)
            ).all()
            ann = s.scalars(select(Author).where(Author.name == "Ann")).one()
            return {"pairs": [list(r) for r in rows],
                    "lazy": sorted(b.title for b in ann.books)}

    def update():
        with Session(engine) as s:
            book = s.scalars(select(Book).where(Book.title == "Third")).one()
            book.year = 2002
            s.commit()
        with Session(engine) as s:
            return s.scalars(select(Book.year).where(Book.title == "Third")).one()

    def delete():
        with Session(engine) as s:
            book = s.scalars(select(Book).where(Book.title == "First")).one()
            s.delete(book)
            s.commit()
        with Session(engine) as s:
            return sorted(s.scalars(select(Book.title)).all())

    def alembic():
        with engine.begin() as conn:
            op = Operations(MigrationContext.configure(conn))
            from sqlalchemy import Column, Integer
            op.add_column("authors", Column("rating", Integer, nullable=True))
            # On a NOT NULL column: an index on a nullable one is issue 36.
            op.create_index("ix_books_title", "books", ["title"])
        with engine.begin() as conn:
            conn.execute(text("UPDATE authors SET rating = 5 WHERE name = 'Ann'"))
        insp = inspect(engine)
        with Session(engine) as s:
            rated = s.execute(text("SELECT name, rating FROM authors ORDER BY name")).all()
            by_title = s.scalars(select(Book.year).where(Book.title == "Third")).all()
        return {"columns": [c["name"] for c in insp.get_columns("authors")],
                "indexes": sorted(i["name"] for i in insp.get_indexes("books")),
                "rated": [list(r) for r in rated], "by_title": by_title}

    def pandas_round_trip():
        frame = pandas.DataFrame({
            "n": range(10_000),
            "word": [f"w{i % 97}" for i in range(10_000)],
            "x": [i / 8 for i in range(10_000)],
        })
        frame.to_sql("measures", engine, if_exists="replace", index=False)
        # A second time: `replace` drops the table and makes it again.
        frame.to_sql("measures", engine, if_exists="replace", index=False)
        back = pandas.read_sql("SELECT n, word, x FROM measures ORDER BY n", engine)
        return {"rows": len(back), "equal": bool(back.equals(frame))}

    def executemany():
        with psycopg.connect(host="127.0.0.1", port=port, user=user, dbname=database) as conn:
            with conn.cursor() as cur:
                cur.execute("CREATE TABLE tags (id SERIAL PRIMARY KEY, tag TEXT NOT NULL)")
                cur.executemany("INSERT INTO tags (tag) VALUES (%s)",
                                [(f"t{i}",) for i in range(250)])
                cur.executemany("INSERT INTO tags (tag) VALUES (%s) RETURNING id",
                                [("x",), ("y",)], returning=True)
                ids = []
                while True:
                    ids.append(cur.fetchone()[0])
                    if not cur.nextset():
                        break
            conn.commit()
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM tags")
                return {"count": cur.fetchone()[0], "returned": ids}

    for name, f in [("create_all", create_all), ("add_all", add_all), ("query", query),
                    ("join", join), ("update", update), ("delete", delete),
                    ("alembic", alembic), ("pandas", pandas_round_trip),
                    ("executemany", executemany)]:
        if not step(name, f):
            break
    print(json.dumps(out))


main()
