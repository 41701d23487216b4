// pgJDBC against `tablesql serve`: the DatabaseMetaData calls a BI tool makes
// when it syncs (DBeaver, Metabase, DataGrip), a prepared query with a fetch
// size (a portal read in batches, which pgJDBC does only with autocommit off),
// and timestamps (as epoch milliseconds). Run as `java -cp postgresql.jar JdbcClient.java PORT USER
// DATABASE`; prints one line per check, `key<TAB>value`, for
// tests/it/clients.rs.
import java.sql.*;
import java.util.*;

public class JdbcClient {
    static void out(String key, Object value) {
        System.out.println(key + "\t" + value);
    }

    static List<String> column(ResultSet rs, String... names) throws SQLException {
        List<String> rows = new ArrayList<>();
        while (rs.next()) {
            StringJoiner row = new StringJoiner("|");
            for (String n : names) row.add(String.valueOf(rs.getObject(n)));
            rows.add(row.toString());
        }
        rs.close();
        return rows;
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/" + args[2];
        try (Connection conn = DriverManager.getConnection(url, args[1], "")) {
            DatabaseMetaData md = conn.getMetaData();
            out("driver", md.getDriverVersion());
            out("product", md.getDatabaseProductName() + " " + md.getDatabaseProductVersion());
            out("catalogs", column(md.getCatalogs(), "TABLE_CAT"));
            out("schemas", column(md.getSchemas(), "TABLE_SCHEM"));
            out("tables", column(md.getTables(null, "public", "%", new String[] {"TABLE", "VIEW"}),
                    "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE"));
            out("columns", column(md.getColumns(null, "public", "registrations", "%"),
                    "COLUMN_NAME", "TYPE_NAME", "DATA_TYPE", "IS_NULLABLE"));
            out("primary_keys", column(md.getPrimaryKeys(null, "public", "registrations"),
                    "COLUMN_NAME", "KEY_SEQ", "PK_NAME"));
            out("index_info", column(md.getIndexInfo(null, "public", "registrations", false, false),
                    "INDEX_NAME", "NON_UNIQUE", "ORDINAL_POSITION", "COLUMN_NAME"));
            out("imported_keys", column(md.getImportedKeys(null, "public", "registrations"), "FKCOLUMN_NAME"));
            List<String> types = column(md.getTypeInfo(), "TYPE_NAME", "DATA_TYPE");
            out("type_info_count", types.size());
            out("type_info_has_int4", types.contains("int4|4"));
            out("functions_count", column(md.getFunctions(null, "pg_catalog", "upper"), "FUNCTION_NAME").size());

            conn.setAutoCommit(false);
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT bib, name, registered FROM registrations WHERE age >= ? ORDER BY event, distance, bib")) {
                ps.setFetchSize(3);
                ps.setInt(1, 30);
                List<String> rows = new ArrayList<>();
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next() && rows.size() < 7) {
                        Timestamp ts = rs.getTimestamp("registered");
                        rows.add(rs.getInt("bib") + "|" + rs.getString("name") + "|" + (ts == null ? "null" : ts.getTime()));
                    }
                }
                out("fetch_size_rows", rows);
            }
            conn.commit();
            // Writes with autocommit off: one entity group transaction per commit.
            String insert = "INSERT INTO registrations (event, distance, bib, name, gender, age) "
                    + "VALUES ('JDBC Tx', '5K', ?, ?, 'F', 40)";
            try (PreparedStatement ins = conn.prepareStatement(insert)) {
                for (int bib : new int[] {1, 2, 3}) {
                    ins.setInt(1, bib);
                    ins.setString(2, "J" + bib);
                    ins.executeUpdate();
                }
            }
            try (PreparedStatement up = conn.prepareStatement(
                    "UPDATE registrations SET club = ? WHERE event = 'JDBC Tx' AND distance = '5K' AND bib = ?")) {
                up.setString(1, "Tx");
                up.setInt(2, 2);
                out("tx_updated", up.executeUpdate());
            }
            conn.commit();
            try (PreparedStatement ins = conn.prepareStatement(insert)) {
                ins.setInt(1, 4);
                ins.setString(2, "J4");
                ins.executeUpdate();
            }
            conn.rollback();
            conn.setAutoCommit(true);
            try (Statement st = conn.createStatement()) {
                out("tx_rows", column(st.executeQuery(
                        "SELECT bib, club FROM registrations WHERE event = 'JDBC Tx' AND distance = '5K' ORDER BY bib"),
                        "bib", "club"));
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT registered FROM registrations WHERE bib = ? ORDER BY event, distance LIMIT 1")) {
                for (int bib : new int[] {3, 5}) {
                    ps.setInt(1, bib);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        out("timestamp_" + bib, rs.getTimestamp(1).getTime());
                    }
                }
            }
        }
    }
}
