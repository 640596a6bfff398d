// Long-lived generic JDBC helper speaking JSON lines (docs/clients.md, "The JSON-lines helper
// protocol"). Any JDBC driver on the class path; requests run concurrently (one thread each),
// replies carry the request's id. Exits when stdin closes (its parent died or quit).
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.sql.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicLong;

public final class JdbcHelper {
    private static final Map<Long, Connection> CONNS = new ConcurrentHashMap<>();
    private static final Map<Long, Statement> RUNNING = new ConcurrentHashMap<>();
    private static final Map<Long, javax.sql.DataSource> SOURCES = new ConcurrentHashMap<>();
    private static final AtomicLong NEXT = new AtomicLong(1);
    private static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);

    public static void main(String[] args) throws Exception {
        System.setOut(new PrintStream(OutputStream.nullOutputStream()));  // drivers' prints are not replies
        ExecutorService pool = Executors.newCachedThreadPool(r -> { Thread t = new Thread(r); t.setDaemon(true); return t; });
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            final String req = line;
            pool.submit(() -> reply(req));
        }
        System.exit(0);
    }

    private static void reply(String line) {
        Object id = null;
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            @SuppressWarnings("unchecked") Map<String, Object> req = (Map<String, Object>) new Json(line).value();
            id = req.get("id");
            handle(req, out);
            out.putIfAbsent("ok", true);
        } catch (SQLException e) {
            out.clear();
            out.put("ok", false);
            out.put("error", e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).split("\n")[0]);
            out.put("sqlstate", e.getSQLState());
            out.put("vendor_code", e.getErrorCode());
        } catch (Throwable e) {
            out.clear();
            out.put("ok", false);
            out.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
        }
        Map<String, Object> full = new LinkedHashMap<>();
        full.put("id", id);
        full.putAll(out);
        synchronized (OUT) { OUT.println(Json.write(full)); }
    }

    private static Connection conn(Map<String, Object> req) throws SQLException {
        Connection c = CONNS.get(((Number) req.get("conn")).longValue());
        if (c == null) throw new SQLException("no connection " + req.get("conn"), "08003");
        return c;
    }

    private static void set(Object target, String name, Object value) throws Exception {
        for (java.lang.reflect.Method m : target.getClass().getMethods()) {
            if (!m.getName().equals("set" + name) || m.getParameterCount() != 1) continue;
            Class<?> t = m.getParameterTypes()[0];
            Object v = value;
            if (value instanceof Number) {
                Number n = (Number) value;
                if (t == int.class || t == Integer.class) v = n.intValue();
                else if (t == long.class || t == Long.class) v = n.longValue();
                else if (t == String.class) v = String.valueOf(value);
            } else if (t == boolean.class || t == Boolean.class) v = Boolean.valueOf(String.valueOf(value));
            m.invoke(target, v);
            return;
        }
        throw new IllegalArgumentException("no setter set" + name + " on " + target.getClass().getName());
    }

    // host:port of the connection's own end of its socket (pgjdbc: through its PGStream), or null
    private static String localAddress(Connection c) {
        try {
            Object base = c.unwrap(Class.forName("org.postgresql.core.BaseConnection"));
            Object qe = base.getClass().getMethod("getQueryExecutor").invoke(base);
            for (Class<?> k = qe.getClass(); k != null; k = k.getSuperclass()) {
                try {
                    java.lang.reflect.Field f = k.getDeclaredField("pgStream");
                    f.setAccessible(true);
                    Object stream = f.get(qe);
                    java.net.Socket sock = (java.net.Socket) stream.getClass().getMethod("getSocket").invoke(stream);
                    return sock.getLocalAddress().getHostAddress() + ":" + sock.getLocalPort();
                } catch (NoSuchFieldException e) { /* superclass */ }
            }
        } catch (Throwable e) { /* not pgjdbc, or its internals moved */ }
        return null;
    }

    private static void handle(Map<String, Object> req, Map<String, Object> out) throws Exception {
        String op = String.valueOf(req.get("op"));
        switch (op) {
            case "hello": {
                out.put("pid", ProcessHandle.current().pid());
                out.put("java", System.getProperty("java.version"));
                Map<String, Object> drivers = new LinkedHashMap<>();
                for (Driver d : Collections.list(DriverManager.getDrivers()))
                    drivers.put(d.getClass().getName(), d.getMajorVersion() + "." + d.getMinorVersion());
                out.put("drivers", drivers);
                Object cls = req.get("driver_class");
                if (cls != null) {
                    Package p = Class.forName(String.valueOf(cls)).getPackage();
                    out.put("driver_version", p == null ? null : p.getImplementationVersion());
                }
                break;
            }
            case "datasource_open": {
                // a pooling DataSource (e.g. com.zaxxer.hikari.HikariDataSource) configured through its setters:
                // "setters": {"JdbcUrl": "...", "MaximumPoolSize": 4} calls setJdbcUrl(...), setMaximumPoolSize(4)
                Object ds = Class.forName(String.valueOf(req.get("class"))).getDeclaredConstructor().newInstance();
                Object setters = req.get("setters");
                if (setters instanceof Map) for (Map.Entry<?, ?> e : ((Map<?, ?>) setters).entrySet()) set(ds, String.valueOf(e.getKey()), e.getValue());
                long id = NEXT.getAndIncrement();
                SOURCES.put(id, (javax.sql.DataSource) ds);
                out.put("datasource", id);
                Package p = ds.getClass().getPackage();
                out.put("version", p == null ? null : p.getImplementationVersion());
                break;
            }
            case "datasource_close": {
                javax.sql.DataSource ds = SOURCES.remove(((Number) req.get("datasource")).longValue());
                if (ds instanceof AutoCloseable) ((AutoCloseable) ds).close();
                break;
            }
            case "local_address": out.put("address", localAddress(conn(req))); break;
            case "open": {
                if (req.get("datasource") instanceof Number) {  // a connection from a pooling DataSource
                    javax.sql.DataSource ds = SOURCES.get(((Number) req.get("datasource")).longValue());
                    if (ds == null) throw new SQLException("no datasource " + req.get("datasource"), "08003");
                    Connection c = ds.getConnection();
                    long id = NEXT.getAndIncrement();
                    CONNS.put(id, c);
                    out.put("conn", id);
                    out.put("address", localAddress(c));
                    break;
                }
                Properties props = new Properties();
                Object given = req.get("properties");
                if (given instanceof Map) for (Map.Entry<?, ?> e : ((Map<?, ?>) given).entrySet())
                    props.setProperty(String.valueOf(e.getKey()), String.valueOf(e.getValue()));
                Connection c = DriverManager.getConnection(String.valueOf(req.get("url")), props);
                long id = NEXT.getAndIncrement();
                CONNS.put(id, c);
                out.put("conn", id);
                break;
            }
            case "execute": {
                // optional: "params" (a list: a PreparedStatement, ? placeholders), "query_timeout" (s)
                Connection c = conn(req);
                Object params = req.get("params");
                String sql = String.valueOf(req.get("sql"));
                long key = ((Number) req.get("conn")).longValue();
                try (Statement st = params instanceof List ? c.prepareStatement(sql) : c.createStatement()) {
                    if (req.get("query_timeout") instanceof Number) st.setQueryTimeout(((Number) req.get("query_timeout")).intValue());
                    boolean rs;
                    RUNNING.put(key, st);
                    try {
                        if (params instanceof List) {
                            PreparedStatement ps = (PreparedStatement) st;
                            int i = 1;
                            for (Object v : (List<?>) params) ps.setObject(i++, v);
                            rs = ps.execute();
                        } else rs = st.execute(sql);
                    } finally { RUNNING.remove(key, st); }
                    List<Object> rows = new ArrayList<>();
                    if (rs) try (ResultSet r = st.getResultSet()) {
                        int n = r.getMetaData().getColumnCount();
                        while (r.next()) {
                            List<Object> row = new ArrayList<>();
                            for (int i = 1; i <= n; i++) row.add(r.getString(i));
                            rows.add(row);
                        }
                    }
                    out.put("rows", rows);
                    out.put("update_count", rs ? -1 : st.getUpdateCount());
                }
                break;
            }
            case "cancel": {  // interrupt the statement running on "conn" (Statement.cancel), if any
                Statement st = RUNNING.get(((Number) req.get("conn")).longValue());
                out.put("cancelled", st != null);
                if (st != null) st.cancel();
                break;
            }
            case "autocommit": conn(req).setAutoCommit(Boolean.TRUE.equals(req.get("value"))); break;
            case "commit": conn(req).commit(); break;
            case "rollback": conn(req).rollback(); break;
            case "close": {
                Connection c = CONNS.remove(((Number) req.get("conn")).longValue());
                if (c != null) c.close();
                break;
            }
            case "quit": new Thread(() -> { try { Thread.sleep(50); } catch (InterruptedException e) { } System.exit(0); }).start(); break;
            default: throw new IllegalArgumentException("unknown op " + op);
        }
    }

    /** A small JSON reader/writer (objects, arrays, strings, numbers, true/false/null). */
    static final class Json {
        private final String s; private int i;
        Json(String s) { this.s = s; }
        Object value() {
            ws();
            char c = s.charAt(i);
            if (c == '{') { i++; Map<String, Object> m = new LinkedHashMap<>(); ws();
                if (s.charAt(i) == '}') { i++; return m; }
                while (true) { ws(); String k = str(); ws(); expect(':'); m.put(k, value()); ws();
                    if (s.charAt(i) == ',') { i++; continue; } expect('}'); return m; } }
            if (c == '[') { i++; List<Object> l = new ArrayList<>(); ws();
                if (s.charAt(i) == ']') { i++; return l; }
                while (true) { l.add(value()); ws(); if (s.charAt(i) == ',') { i++; continue; } expect(']'); return l; } }
            if (c == '"') return str();
            if (s.startsWith("true", i)) { i += 4; return Boolean.TRUE; }
            if (s.startsWith("false", i)) { i += 5; return Boolean.FALSE; }
            if (s.startsWith("null", i)) { i += 4; return null; }
            int j = i; while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            String num = s.substring(j, i);
            if (num.isEmpty()) throw new IllegalArgumentException("bad JSON at " + j);
            return num.contains(".") || num.contains("e") || num.contains("E") ? (Object) Double.parseDouble(num) : (Object) Long.parseLong(num);
        }
        private void ws() { while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++; }
        private void expect(char c) { if (s.charAt(i) != c) throw new IllegalArgumentException("expected " + c + " at " + i); i++; }
        private String str() {
            expect('"'); StringBuilder b = new StringBuilder();
            while (true) { char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c == '\\') { char e = s.charAt(i++);
                    switch (e) { case 'n': b.append('\n'); break; case 't': b.append('\t'); break; case 'r': b.append('\r'); break;
                        case 'b': b.append('\b'); break; case 'f': b.append('\f'); break;
                        case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                        default: b.append(e); } }
                else b.append(c); }
        }
        static String write(Object v) {
            if (v == null) return "null";
            if (v instanceof Boolean || v instanceof Number) return String.valueOf(v);
            if (v instanceof Map) { StringJoiner j = new StringJoiner(",", "{", "}");
                for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) j.add(write(String.valueOf(e.getKey())) + ":" + write(e.getValue()));
                return j.toString(); }
            if (v instanceof List) { StringJoiner j = new StringJoiner(",", "[", "]");
                for (Object o : (List<?>) v) j.add(write(o)); return j.toString(); }
            StringBuilder b = new StringBuilder("\"");
            for (char c : String.valueOf(v).toCharArray()) {
                if (c == '"' || c == '\\') b.append('\\').append(c);
                else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                else b.append(c); }
            return b.append('"').toString();
        }
    }
}
